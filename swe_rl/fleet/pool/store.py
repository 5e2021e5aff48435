"""Leases: what a client holds (a container on one node), and their SQLite record.

The record lets a restarted pool forget no lease; the in-memory `LeaseRecord` also carries what only
matters while the pool runs (last heartbeat, calls in flight, why its container is gone).
"""

from __future__ import annotations

import concurrent.futures
import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from swe_rl.fleet.protocol import ApiError

if TYPE_CHECKING:
    from swe_rl.fleet.pool.nodes import Node


@dataclass(slots=True)
class LeaseRecord:
    """A container on one node held by a client (`lease_id`), kept alive by heartbeats and calls."""

    lease_id: str
    request_id: str | None
    node: str
    container_id: str
    image: str
    instance_id: str | None
    workdir: str
    created: float
    """Wall time of the allocation."""
    last_seen: float = field(default_factory=time.monotonic)
    """Monotonic time of the last heartbeat or call (memory only)."""
    lost: str | None = None
    """Why the container is gone, once it is; calls then answer 410."""
    in_flight: int = 0
    warm: bool = False
    """The node handed over a warm container (memory only)."""
    owner: str = ""
    """Who allocated it (the client's owner string, memory only): who may snapshot it and restore those."""
    image_id: str = ""
    """The image's ID as the node reported it at the allocation (memory only: '' after a restart)."""

    def touch(self) -> None:
        """A heartbeat or a call: the lease's TTL starts again."""
        self.last_seen = time.monotonic()

    def public(self, ttl: float) -> dict[str, Any]:
        idle = time.monotonic() - self.last_seen
        return {
            "lease_id": self.lease_id,
            "node": self.node,
            "container_id": self.container_id,
            "image": self.image,
            "instance_id": self.instance_id,
            "workdir": self.workdir,
            "expires_at": round(time.time() + ttl - idle, 3),
            "warm": self.warm,
            "image_id": self.image_id,
        }


class RecordStore(Protocol):
    """What the pool needs of a lease record: `LeaseStore` (SQLite, one process) or
    `shared_store.SharedLeaseStore` (PostgreSQL, several replicas)."""

    shared: bool

    def load(self) -> list[LeaseRecord]: ...
    def count(self) -> int: ...
    def put(self, lease: LeaseRecord) -> concurrent.futures.Future[None]: ...
    def delete(
        self, lease_id: str, kind: str = "gone", reason: str = ""
    ) -> concurrent.futures.Future[None]: ...
    def flush(self) -> None: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...


class LeaseStore:
    """SQLite record of live leases, so a restarted pool forgets none.

    Written on allocate, close and reclaim only; heartbeats stay in memory and
    every lease loaded at start gets a fresh heartbeat window. One pool process owns the file; several
    replicas share a `shared_store.SharedLeaseStore` instead (`shared` says which the pool has).
    """

    shared = False

    COLUMNS = (
        "lease_id",
        "request_id",
        "node",
        "container_id",
        "image",
        "instance_id",
        "workdir",
        "created",
        "last_seen",
    )

    def __init__(self, path: str) -> None:
        # Every write runs on this one thread, in the order it was asked for: never on the pool's event
        # loop, where a write took p99 8-18 ms (143 ms at worst) from every call in flight.
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="swe-lease-store")
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # survives a killed process, which is what matters here
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS leases (lease_id TEXT PRIMARY KEY, request_id TEXT UNIQUE, node TEXT NOT NULL,"
            " container_id TEXT NOT NULL, image TEXT NOT NULL, instance_id TEXT, workdir TEXT, created REAL NOT NULL,"
            " last_seen REAL NOT NULL)"
        )

    def load(self) -> list[LeaseRecord]:
        query = f"SELECT {', '.join(self.COLUMNS[:-1])} FROM leases"
        rows = self._writer.submit(lambda: self.db.execute(query).fetchall()).result()
        leases = []
        for lid, rid, node, cid, image, instance, workdir, created in rows:  # repeated strings: one each
            leases.append(
                LeaseRecord(
                    lid, rid, sys.intern(node), cid, sys.intern(image), instance, sys.intern(workdir), created
                )
            )
        return leases

    def count(self) -> int:
        return int(
            self._writer.submit(lambda: self.db.execute("SELECT COUNT(*) FROM leases").fetchone()[0]).result()
        )

    def put(self, lease: LeaseRecord) -> concurrent.futures.Future[None]:
        """Record the lease on the writer thread; the future is done once it is written (an allocate
        answers only then: a lease the pool handed out survives a SIGKILL of the pool)."""
        return self._writer.submit(self._put, lease)

    def delete(self, lease_id: str, kind: str = "gone", reason: str = "") -> concurrent.futures.Future[None]:
        """Forget the lease on the writer thread (after any earlier put of it); `kind` and `reason`
        matter only to a shared store, whose other replicas learn of it."""
        return self._writer.submit(self._delete, lease_id)

    def flush(self) -> None:
        """Wait until every write asked for so far is done."""
        self._writer.submit(lambda: None).result()

    def _put(self, lease: LeaseRecord) -> None:
        self.db.execute(
            f"INSERT OR REPLACE INTO leases VALUES ({', '.join('?' * len(self.COLUMNS))})",
            (
                lease.lease_id,
                lease.request_id,
                lease.node,
                lease.container_id,
                lease.image,
                lease.instance_id,
                lease.workdir,
                lease.created,
                time.time(),
            ),
        )

    def _delete(self, lease_id: str) -> None:
        self.db.execute("DELETE FROM leases WHERE lease_id = ?", (lease_id,))

    def clear(self) -> None:
        self._writer.submit(self.db.execute, "DELETE FROM leases").result()

    def close(self) -> None:
        self._writer.shutdown(wait=True)  # every write asked for lands before the file closes
        self.db.close()


class LeaseTable:
    """The live leases with the indexes the pool needs (by request id, by node).

    Kept in step with the SQLite record and with each node's count of active leases, so an allocate
    or a routed call costs the same with 10 leases or 10,000.
    """

    def __init__(self, store: RecordStore, nodes: dict[str, Node]) -> None:
        self.store, self.nodes = store, nodes
        self.leases: dict[str, LeaseRecord] = {}
        self.by_request: dict[str, str] = {}
        self.by_node: dict[str, dict[str, LeaseRecord]] = {url: {} for url in nodes}

    def add(self, lease: LeaseRecord) -> None:
        self.leases[lease.lease_id] = lease
        if lease.request_id:
            self.by_request[lease.request_id] = lease.lease_id
        self.by_node.setdefault(lease.node, {})[lease.lease_id] = lease
        node = self.nodes.get(lease.node)
        if node is not None and not lease.lost:
            node.active += 1

    def drop(self, lease: LeaseRecord) -> None:
        if self.leases.get(lease.lease_id) is lease:
            del self.leases[lease.lease_id]
            self.by_node.get(lease.node, {}).pop(lease.lease_id, None)
            node = self.nodes.get(lease.node)
            if node is not None and not lease.lost:
                node.active -= 1
        if lease.request_id and self.by_request.get(lease.request_id) == lease.lease_id:
            del self.by_request[lease.request_id]
        self.store.delete(lease.lease_id)

    def forget(self, lease_id: str, lost: str | None = None) -> LeaseRecord | None:
        """Another replica released the lease (`lost`: or found its container gone): drop it from this
        cache, or keep it as a tombstone, without writing the record (the other replica did)."""
        lease = self.leases.get(lease_id)
        if lease is None:
            return None
        if lost is not None:
            if lease.lost is None:
                lease.lost = lost
                node = self.nodes.get(lease.node)
                if node is not None:
                    node.active -= 1
            return lease
        node = self.nodes.get(lease.node)
        if node is not None and not lease.lost:
            node.active -= 1
        del self.leases[lease_id]
        self.by_node.get(lease.node, {}).pop(lease_id, None)
        if lease.request_id and self.by_request.get(lease.request_id) == lease_id:
            del self.by_request[lease.request_id]
        return lease

    def mark_lost(self, lease: LeaseRecord, reason: str) -> bool:
        """Record that the lease's container is gone (a tombstone stays until close or TTL); False if known."""
        if lease.lost is not None:
            return False
        lease.lost = reason
        node = self.nodes.get(lease.node)
        if node is not None and self.leases.get(lease.lease_id) is lease:
            node.active -= 1
        self.store.delete(lease.lease_id, "lost", reason)
        return True

    def of(self, body: dict[str, Any], *, allow_lost: bool = False) -> LeaseRecord:
        """The lease a request names: 400 without a lease id, 404 unknown, 410 when its container is gone."""
        lease_id = body.get("lease_id")
        if not isinstance(lease_id, str) or not lease_id:
            raise ApiError(400, "missing or empty string field 'lease_id'")
        lease = self.leases.get(lease_id)
        if lease is None:
            raise ApiError(404, f"unknown or expired lease {lease_id!r}", lease_id=lease_id, lease_lost=True)
        if lease.lost and not allow_lost:
            raise ApiError(
                410,
                f"container of lease {lease_id} is gone: {lease.lost}",
                lease_id=lease_id,
                lease_lost=True,
            )
        return lease
