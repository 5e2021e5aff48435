"""The pool's snapshots: taken from a lease, owned by the lease's owner, restored into new leases.

Why the pool keeps them: a snapshot lives on the node that took it (`exec/snapshots.py`), but a branch
may land on any node with the image. The pool remembers where each is, who owns it and until when;
when the new lease is on another node it carries the tarball there itself (GET from one node, PUT to
the other, sha256 checked by the receiver), so nodes never need to reach each other. Records are kept
in memory only: after a pool restart old ids answer 404 and the nodes' reapers delete the tarballs
when they expire.

One seam with the pool: the pool owns a `Snapshots` and this module never imports the pool; it sees
only `SnapshotPool`, the pool's public surface it needs, of which `allocate_then` (allocate a lease,
prepare it before anyone gets it, release it when the preparation fails) is the allocate from a
snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from swe_rl.fleet.pool.metrics import Metrics
from swe_rl.fleet.pool.nodes import Node, NodeSet
from swe_rl.fleet.pool.routing import NodeCalls, json_of
from swe_rl.fleet.pool.store import LeaseRecord
from swe_rl.fleet.protocol import AllocateRequest, ApiError
from swe_rl.fleet.snapshot_protocol import (
    SNAPSHOT_ID,
    DeleteSnapshotRequest,
    ExecRestoreRequest,
    ExecSnapshotRequest,
    LeaseSnapshotRequest,
    SnapshotInfo,
    SnapshotMeta,
    container_image_ref,
    parse,
)

log = logging.getLogger("swe_pool_server")

DEFAULT_TTL = 3600.0
"""Seconds a snapshot is kept when the caller does not say."""
SNAPSHOT_CALL_TIMEOUT = 900.0
"""Seconds a node may take to capture or restore (a capture runs a diff of the whole tree)."""
META_HEADER = "X-Snapshot-Meta"


Prepare = Callable[[LeaseRecord], Awaitable[dict[str, Any]]]
"""Makes a just-allocated lease ready (a restore); its answer is merged into the allocate's."""


class SnapshotPool(Protocol):
    """What the snapshots need of the pool (`swe_rl.fleet.pool.pool.Pool` is one)."""

    nodes: NodeSet
    calls: NodeCalls
    metrics: Metrics

    def lease_of(self, body: dict[str, Any], *, allow_lost: bool = False) -> LeaseRecord: ...

    async def known(self, body: dict[str, Any]) -> None: ...

    async def allocate_then(
        self,
        req: AllocateRequest,
        prepare: Prepare,
        *,
        pin: tuple[str, str] | None = None,
        prefer: str = "",
        what: str,
    ) -> dict[str, Any]: ...


@dataclass
class PoolSnapshot:
    info: SnapshotInfo
    owner: str
    workdir: str
    holders: set[str] = field(default_factory=set)
    """Nodes holding a copy: the one that took it, and each a restore carried it to (deletes go there)."""

    def __post_init__(self) -> None:
        self.holders.add(self.info.node)

    @property
    def expired(self) -> bool:
        return self.info.expires_at < time.time()


class SharedRecords(Protocol):
    """Snapshot records shared by pool replicas (`shared_store.SharedLeaseStore` is one)."""

    def put_snapshot(self, snapshot_id: str, expires_at: float, record: dict[str, Any]) -> Future[None]: ...
    def get_snapshot(self, snapshot_id: str) -> Future[dict[str, Any] | None]: ...
    def delete_snapshot(self, snapshot_id: str) -> Future[bool]: ...
    def expired_snapshots(self, now: float) -> Future[list[dict[str, Any]]]: ...


class Snapshots:
    """Snapshot records of one pool, and the calls that take, move, restore and delete them.

    With pool replicas (`shared`: the replicas' PostgreSQL record) every record is also written there, so a
    snapshot taken through one replica is restored or deleted through any, and expires once."""

    def __init__(self, pool: SnapshotPool, shared: SharedRecords | None = None) -> None:
        self.pool = pool
        self.shared = shared
        self.records: dict[str, PoolSnapshot] = {}

    async def _save(self, snap: PoolSnapshot) -> None:
        if self.shared is not None:
            record = {"info": snap.info.model_dump(), "owner": snap.owner, "workdir": snap.workdir,
                      "holders": sorted(snap.holders)}  # fmt: skip
            await asyncio.wrap_future(
                self.shared.put_snapshot(snap.info.snapshot_id, snap.info.expires_at, record)
            )

    @staticmethod
    def _from_record(record: dict[str, Any]) -> PoolSnapshot:
        info = SnapshotInfo.model_validate(record["info"])
        return PoolSnapshot(info, str(record["owner"]), str(record["workdir"]), set(record["holders"]))

    async def known(self, snapshot_id: Any) -> None:
        """With replicas: the snapshot's record as the database has it now (another replica may have
        taken it, moved it to another node, or deleted it)."""
        if self.shared is not None and isinstance(snapshot_id, str):
            record = await asyncio.wrap_future(self.shared.get_snapshot(snapshot_id))
            if record is None:
                self.records.pop(snapshot_id, None)
            else:
                self.records[snapshot_id] = self._from_record(record)

    async def take(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /leases/<lease_id>/snapshot``: the lease's state as a new snapshot id."""
        await self.pool.known(body)  # (a lease another pool replica allocated)
        lease = self.pool.lease_of(body)
        req = parse(LeaseSnapshotRequest, {k: v for k, v in body.items() if k != "lease_id"})
        if lease.owner and req.owner != lease.owner:
            raise ApiError(403, f"lease {lease.lease_id} belongs to another owner")
        node = self.pool.nodes.get(lease.node)
        await node.checked.wait()  # at once, unless the pool has just started and is checking it
        ttl = req.ttl or DEFAULT_TTL
        sid = new_snapshot_id()
        payload = ExecSnapshotRequest(
            snapshot_id=sid, kind=req.kind, owner=lease.owner, ttl=ttl, extra_paths=req.extra_paths
        )
        lease.touch()
        lease.in_flight += 1
        try:
            resp = await self.pool.calls.post(
                node,
                f"/containers/{lease.container_id}/snapshot",
                payload.model_dump(),
                SNAPSHOT_CALL_TIMEOUT,
            )
        finally:
            lease.in_flight -= 1
            lease.touch()
        data = json_of(resp)
        if resp.status_code != 200:
            raise _node_error(resp.status_code, data, node)
        meta = SnapshotMeta.model_validate({k: v for k, v in data.items() if k != "duration"})
        info = SnapshotInfo(
            snapshot_id=sid,
            kind=meta.kind,
            lease_id=lease.lease_id,
            image=lease.image,
            node=node.url,
            sha256=meta.sha256,
            state_hash=meta.state_hash,
            tree=meta.tree,
            bytes=meta.bytes,
            expires_at=meta.expires_at,
            duration=float(data.get("duration", 0.0)),
        )
        self.records[sid] = PoolSnapshot(info, lease.owner, lease.workdir)
        await self._save(self.records[sid])
        self.pool.metrics.inc("swe_pool_snapshots_total", outcome="ok")
        return info.model_dump()

    def for_allocate(self, body: dict[str, Any]) -> PoolSnapshot:
        """The snapshot an allocate names (`from_snapshot`): 404 unknown/expired, 403 another owner's,
        409 another image. Fills the body's image and workdir from it when absent."""
        sid = body.get("from_snapshot")
        if not isinstance(sid, str) or not SNAPSHOT_ID.match(sid):
            raise ApiError(400, "from_snapshot must be a snapshot id")
        snap = self.records.get(sid)
        if snap is None or snap.expired:
            raise ApiError(404, f"unknown or expired snapshot {sid}")
        if snap.owner and body.get("owner") != snap.owner:
            raise ApiError(403, f"snapshot {sid} belongs to another owner")
        body.setdefault("image", snap.info.image)
        if body["image"] != snap.info.image:
            raise ApiError(409, f"snapshot {sid} is of image {snap.info.image}, not {body['image']}")
        body.setdefault("workdir", snap.workdir)
        return snap

    async def allocate_from(self, snap: PoolSnapshot, req: AllocateRequest) -> dict[str, Any]:
        """A new lease of the snapshot's image with its state restored (released if the restore fails).
        A container snapshot's lease is a container of its committed image on the node that holds it:
        503 when that node is down (it may come back), 429 when it is at its cap (retry later)."""
        if snap.info.kind == "container":
            holder = self.pool.nodes.nodes.get(snap.info.node)
            if holder is None or not holder.healthy:
                raise ApiError(
                    503,
                    f"node {snap.info.node} holding container snapshot {snap.info.snapshot_id} is down",
                    node=snap.info.node,
                    node_down=True,
                )
            pin: tuple[str, str] | None = (holder.url, container_image_ref(snap.info.snapshot_id))
        else:
            pin = None

        async def restore(lease: LeaseRecord) -> dict[str, Any]:
            return await self.restore(lease, snap)

        return await self.pool.allocate_then(  # among equals, on the node that holds it: nothing to carry
            req, restore, pin=pin, prefer=snap.info.node, what=f"restore of snapshot {snap.info.snapshot_id}"
        )

    async def restore(self, lease: LeaseRecord, snap: PoolSnapshot) -> dict[str, Any]:
        """Give the (fresh) lease the snapshot's state; the node verifies the state hash."""
        sid = snap.info.snapshot_id
        node = self.pool.nodes.get(lease.node)
        moved = lease.node != snap.info.node
        if moved:  # bring the tarball over: from the node that took it, through the pool
            source = self.pool.nodes.get(snap.info.node)
            got = await self._raw(source, "GET", f"/snapshots/{sid}")
            if got.status_code != 200:
                raise _node_error(got.status_code, json_of(got), source)
            put = await self._raw(
                node,
                "PUT",
                f"/snapshots/{sid}",
                content=got.content,
                headers={META_HEADER: got.headers[META_HEADER]},
            )
            if put.status_code not in (200, 409):  # 409: a previous restore brought it already
                raise _node_error(put.status_code, json_of(put), node)
            snap.holders.add(node.url)
            await self._save(snap)  # (its deletes must reach this node too, from any replica)
        body = ExecRestoreRequest(snapshot_id=sid).model_dump()
        resp = await self.pool.calls.post(
            node, f"/containers/{lease.container_id}/restore", body, SNAPSHOT_CALL_TIMEOUT
        )
        data = json_of(resp)
        if resp.status_code != 200:
            raise _node_error(resp.status_code, data, node)
        if data.get("state_hash") != snap.info.state_hash or data.get("tree", "") != snap.info.tree:
            raise ApiError(
                502, f"node restored tree {data.get('tree')} ({data.get('state_hash')}), not {snap.info.tree}"
            )
        self.pool.metrics.inc("swe_pool_restores_total", moved=str(moved).lower())
        return {"from_snapshot": sid, "state_hash": data["state_hash"], "tree": data.get("tree", ""),
                "snapshot_moved": moved, "restore_seconds": data.get("duration")}  # fmt: skip

    async def delete(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /snapshots/delete``: forget a snapshot and delete its tarballs (idempotent)."""
        req = parse(DeleteSnapshotRequest, body)
        await self.known(req.snapshot_id)
        snap = self.records.get(req.snapshot_id)
        if snap is None:
            return {"ok": True, "already_deleted": True}
        if snap.owner and req.owner != snap.owner:
            raise ApiError(403, f"snapshot {req.snapshot_id} belongs to another owner")
        if not await self._forget(snap):
            return {"ok": True, "already_deleted": True}  # another replica's delete got there first
        return {"ok": True, "deleted": True}

    async def reap(self) -> None:
        """Forget expired snapshots and delete their tarballs (the nodes' reapers also do)."""
        if self.shared is not None:  # each expired record goes to one replica, which deletes its tarballs
            for record in await asyncio.wrap_future(self.shared.expired_snapshots(time.time())):
                await self._forget(self._from_record(record))
        for snap in [s for s in self.records.values() if s.expired]:
            await self._forget(snap)

    async def _forget(self, snap: PoolSnapshot) -> bool:
        """Delete the copies on the nodes that hold one, all at once (it asked every node, one after
        another: 141 ms of pool CPU per delete at 100 nodes). A node down now reaps its copy at expiry."""
        sid = snap.info.snapshot_id
        self.records.pop(sid, None)
        removed = True
        if self.shared is not None:  # False: another replica forgot it already (its tarballs go anyway)
            removed = await asyncio.wrap_future(self.shared.delete_snapshot(sid))

        async def delete(node: Node) -> None:
            try:
                await self._raw(node, "DELETE", f"/snapshots/{sid}")
            except ApiError as exc:
                log.info("delete of snapshot %s on %s failed: %s", sid, node.url, exc.message)

        nodes = [n for n in self.pool.nodes.healthy() if n.url in snap.holders]
        await asyncio.gather(*(delete(n) for n in nodes))
        return removed

    async def _raw(self, node: Node, method: str, path: str, **kw: Any) -> httpx.Response:
        """A non-JSON call to a node (tarballs up and down); transport errors are 503s."""
        http = self.pool.calls.shards_of(node.url)[0]
        try:
            return await http.request(method, node.url + path, timeout=SNAPSHOT_CALL_TIMEOUT, **kw)
        except httpx.HTTPError as exc:
            raise ApiError(503, f"node {node.url}: {type(exc).__name__}: {exc}", node=node.url) from exc


def new_snapshot_id() -> str:
    """A random snapshot id that starts with a letter or digit. Why: a container snapshot's image tag is
    `swe-rl-snapshot:<id>`, and Docker refuses a tag starting with '-' (seen: 'invalid reference format'
    for one snapshot in 64, as `token_urlsafe` begins with '-' that often)."""
    while True:
        sid = secrets.token_urlsafe(16)
        if sid[0].isalnum():
            return sid


def _node_error(status: int, data: dict[str, Any], node: Node) -> ApiError:
    """A node's error answer passed on (its 4xx as is: budget 507/429, a bad state 409/422)."""
    extra = {k: v for k, v in data.items() if k not in ("error", "node")}
    headers = {"Retry-After": "2"} if status == 429 else None
    return ApiError(
        status, str(data.get("error", f"node answered {status}")), headers, node=node.url, **extra
    )
