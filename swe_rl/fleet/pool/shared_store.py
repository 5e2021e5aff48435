"""The lease record on PostgreSQL, shared by several pool replicas (`SWE_POOL_DATABASE_URL`).

Why: one pool process routes ~600-700 calls/s on its core; a large cluster runs several pool processes
behind one list of URLs, and any of them must serve any lease, including after another one died. Each
replica keeps a cache of the leases it serves (`store.LeaseTable`); this database is the truth they share:
- a lease row is written when an allocate starts (`reserve`: a pending row, no container yet, so no
  replica's reconciliation takes the container being made for an orphan) and completed when it ends
  (`put`); a replica that does not know a lease loads it from here (`fetch`, `by_request`);
- heartbeats and calls are kept in memory and pushed in batches (`touch`, every sync interval), so the
  row's `last_seen` lags a client's last sign of life by at most one interval;
- expiry runs in the database: `expire` deletes the rows idle past the TTL with
  `SELECT ... FOR UPDATE SKIP LOCKED` and returns them, so exactly one replica gets each expired lease and
  destroys its container;
- every removal (close, expiry, lost container) leaves an event that the other replicas read (`events`)
  to drop the lease from their caches; node loads are counted here (`node_counts`) for placement.
Every call runs on one of this store's two threads (a writer and a reader, each with its own connection),
never on the pool's event loop; each returns a `concurrent.futures.Future`.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from swe_rl.fleet.pool.store import LeaseRecord
from swe_rl.fleet.protocol import ApiError

log = logging.getLogger("swe_pool_server")
T = TypeVar("T")

NOW = "extract(epoch from clock_timestamp())::double precision"
"""The database's clock: replicas on several hosts agree on one."""
EVENT_STRAGGLE = 5.0
"""Seconds of events read again on each pass: a transaction that took an earlier sequence number may
commit after a later one was read."""
EVENT_KEEP = 600.0
"""Seconds events are kept (a replica that sleeps longer reloads nothing stale: it only ever caches leases
it loaded since, and drops one whose container is gone on the node's answer)."""
SCHEMA_LOCK = 0x5E7E_A5E5
"""Advisory lock held while the schema is made: two replicas starting at once must not race on it."""

COLUMNS = (
    "lease_id",
    "request_id",
    "node",
    "container_id",
    "image",
    "instance_id",
    "workdir",
    "created",
    "owner",
    "warm",
)
SELECT = f"SELECT {', '.join(COLUMNS)} FROM leases"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS leases (lease_id TEXT PRIMARY KEY, request_id TEXT UNIQUE, node TEXT NOT NULL,"
    " container_id TEXT NOT NULL, image TEXT NOT NULL, instance_id TEXT, workdir TEXT,"
    " created DOUBLE PRECISION NOT NULL, last_seen DOUBLE PRECISION NOT NULL, owner TEXT NOT NULL DEFAULT '',"
    " warm BOOLEAN NOT NULL DEFAULT false)",
    "CREATE INDEX IF NOT EXISTS leases_last_seen ON leases (last_seen)",
    "CREATE INDEX IF NOT EXISTS leases_node ON leases (node)",
    "CREATE TABLE IF NOT EXISTS lease_events (seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL,"
    " lease_id TEXT NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '')",
    "CREATE INDEX IF NOT EXISTS lease_events_at ON lease_events (at)",
    "CREATE TABLE IF NOT EXISTS pool_snapshots (snapshot_id TEXT PRIMARY KEY,"
    " expires_at DOUBLE PRECISION NOT NULL, record JSONB NOT NULL)",
)


def _record(row: tuple[Any, ...]) -> LeaseRecord:
    lid, rid, node, cid, image, instance, workdir, created, owner, warm = row
    return LeaseRecord(
        lid,
        rid,
        sys.intern(node),
        cid,
        sys.intern(image),
        instance,
        sys.intern(workdir or "/testbed"),
        created,
        warm=bool(warm),
        owner=owner or "",
    )


class _Connection:
    """One connection used by one thread; reconnected once when the server dropped it (a restart)."""

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"swe-lease-db-{name}")
        self.conn: psycopg.Connection[Any] | None = None

    def submit(self, fn: Callable[[psycopg.Connection[Any]], T]) -> concurrent.futures.Future[T]:
        return self.pool.submit(self._run, fn)

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`fn` on this thread's connection; the database unreachable is a 503 (clients retry it)."""
        for attempt in (1, 2):
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
                return fn(self.conn)
            except psycopg.OperationalError as exc:
                broken = self.conn is None or self.conn.broken
                self.conn = None if broken else self.conn
                if attempt == 2 or not broken:
                    raise ApiError(503, f"lease database unavailable: {exc}", database_down=True) from exc
                log.warning("lease database connection (%s) dropped (%s): reconnecting", self.name, exc)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.conn is not None:
            self.conn.close()


class SharedLeaseStore:
    """The PostgreSQL record of every replica's leases (the same surface as `store.LeaseStore`, and more)."""

    shared = True

    def __init__(self, url: str) -> None:
        self.url = url
        self._writer = _Connection(url, "writer")
        self._reader = _Connection(url, "reader")
        self._event_floor = 0
        self._seen_events: dict[int, float] = {}
        self._writer.submit(self._schema).result()

    @staticmethod
    def _schema(db: psycopg.Connection[Any]) -> None:
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            for statement in SCHEMA:
                db.execute(statement)

    # ---- what `store.LeaseStore` also does

    def load(self) -> list[LeaseRecord]:
        """Every complete lease (pending ones have no container yet)."""
        rows = self._reader.submit(lambda db: db.execute(SELECT + " WHERE container_id <> ''").fetchall())
        return [_record(row) for row in rows.result()]

    def count(self) -> int:
        def count(db: psycopg.Connection[Any]) -> int:
            row = db.execute("SELECT count(*) FROM leases WHERE container_id <> ''").fetchone()
            return int(row[0]) if row else 0

        return self._reader.submit(count).result()

    def put(self, lease: LeaseRecord) -> concurrent.futures.Future[None]:
        """Write the complete lease (its pending row, made by `reserve`, becomes it)."""

        def put(db: psycopg.Connection[Any]) -> None:
            db.execute(
                f"INSERT INTO leases ({', '.join(COLUMNS)}, last_seen) VALUES ({', '.join(['%s'] * len(COLUMNS))},"
                f" {NOW}) ON CONFLICT (lease_id) DO UPDATE SET container_id = excluded.container_id,"
                " node = excluded.node, workdir = excluded.workdir, warm = excluded.warm, last_seen = excluded.last_seen",
                (
                    lease.lease_id,
                    lease.request_id,
                    lease.node,
                    lease.container_id,
                    lease.image,
                    lease.instance_id,
                    lease.workdir,
                    lease.created,
                    lease.owner,
                    lease.warm,
                ),  # fmt: skip
            )

        return self._writer.submit(put)

    def delete(self, lease_id: str, kind: str = "gone", reason: str = "") -> concurrent.futures.Future[None]:
        """Forget the lease and tell the other replicas (`kind` gone: released; lost: its container is)."""

        def delete(db: psycopg.Connection[Any]) -> None:
            with db.transaction():
                cur = db.execute("DELETE FROM leases WHERE lease_id = %s", (lease_id,))
                if cur.rowcount:
                    db.execute(
                        f"INSERT INTO lease_events (at, lease_id, kind, reason) VALUES ({NOW}, %s, %s, %s)",
                        (lease_id, kind, reason),
                    )

        return self._writer.submit(delete)

    def flush(self) -> None:
        self._writer.submit(lambda db: None).result()

    def clear(self) -> None:
        """Nothing: the record is every replica's, and one replica stopping releases none of it."""

    def close(self) -> None:
        self._writer.close()
        self._reader.close()

    # ---- what only a shared record needs

    def reserve(self, lease: LeaseRecord) -> concurrent.futures.Future[str | None]:
        """Record an allocation about to start (no container yet); the lease id already holding the
        request id when another replica got there first (None: reserved)."""

        def reserve(db: psycopg.Connection[Any]) -> str | None:
            row = db.execute(
                f"INSERT INTO leases ({', '.join(COLUMNS)}, last_seen) VALUES ({', '.join(['%s'] * len(COLUMNS))},"
                f" {NOW}) ON CONFLICT DO NOTHING RETURNING lease_id",
                (
                    lease.lease_id,
                    lease.request_id,
                    lease.node,
                    "",
                    lease.image,
                    lease.instance_id,
                    lease.workdir,
                    lease.created,
                    lease.owner,
                    False,
                ),  # fmt: skip
            ).fetchone()
            if row is not None:
                return None
            other = db.execute(
                "SELECT lease_id FROM leases WHERE request_id = %s", (lease.request_id,)
            ).fetchone()
            return str(other[0]) if other else ""

        return self._writer.submit(reserve)

    def fetch(self, lease_ids: list[str]) -> concurrent.futures.Future[list[LeaseRecord]]:
        """The complete leases among `lease_ids` (a replica serving leases another one allocated)."""
        return self._reader.submit(
            lambda db: [
                _record(row)
                for row in db.execute(
                    SELECT + " WHERE lease_id = ANY(%s) AND container_id <> ''", (lease_ids,)
                ).fetchall()
            ]
        )

    def by_request(self, request_id: str) -> concurrent.futures.Future[tuple[LeaseRecord | None, bool]]:
        """The lease of an allocate's request id, and whether one exists at all (pending counts)."""

        def find(db: psycopg.Connection[Any]) -> tuple[LeaseRecord | None, bool]:
            row = db.execute(SELECT + " WHERE request_id = %s", (request_id,)).fetchone()
            if row is None:
                return None, False
            return (_record(row) if row[3] else None), True

        return self._reader.submit(find)

    def touch(self, lease_ids: list[str]) -> concurrent.futures.Future[int]:
        """The leases had a heartbeat or a call (or one in flight): their idle time starts again."""
        return self._writer.submit(
            lambda db: (
                db.execute(
                    f"UPDATE leases SET last_seen = {NOW} WHERE lease_id = ANY(%s)", (lease_ids,)
                ).rowcount
            )
        )

    def expire(
        self, ttl: float, pending_ttl: float, limit: int = 1000
    ) -> concurrent.futures.Future[list[LeaseRecord]]:
        """Delete and return leases idle for `ttl` (pending ones for `pending_ttl`: their replica died
        mid-allocate). Rows another replica is expiring now are skipped, so each goes to exactly one."""

        def expire(db: psycopg.Connection[Any]) -> list[LeaseRecord]:
            with db.transaction():
                rows = db.execute(
                    f"DELETE FROM leases WHERE lease_id IN (SELECT lease_id FROM leases WHERE"
                    f" (container_id <> '' AND last_seen < {NOW} - %s) OR (container_id = '' AND last_seen < {NOW} - %s)"
                    f" ORDER BY last_seen LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING {', '.join(COLUMNS)}",
                    (ttl, pending_ttl, limit),
                ).fetchall()
                if rows:
                    with db.cursor() as cur:
                        cur.executemany(
                            f"INSERT INTO lease_events (at, lease_id, kind, reason) VALUES ({NOW}, %s, 'gone', 'expired')",
                            [(row[0],) for row in rows],
                        )
                db.execute(f"DELETE FROM lease_events WHERE at < {NOW} - %s", (EVENT_KEEP,))
            return [_record(row) for row in rows if row[3]]

        return self._writer.submit(expire)

    def events(self) -> concurrent.futures.Future[list[tuple[str, str, str]]]:
        """Removals since the last call, as (lease id, kind, reason); some may come twice."""

        def events(db: psycopg.Connection[Any]) -> list[tuple[str, str, str]]:
            now_row = db.execute(f"SELECT {NOW}").fetchone()
            assert now_row is not None
            rows = db.execute(
                "SELECT seq, at, lease_id, kind, reason FROM lease_events WHERE seq > %s ORDER BY seq",
                (self._event_floor,),
            ).fetchall()
            settled = now_row[0] - EVENT_STRAGGLE
            fresh = [
                (lid, kind, reason) for seq, at, lid, kind, reason in rows if seq not in self._seen_events
            ]
            for seq, at, *_ in rows:
                self._seen_events[seq] = at
                if at < settled:
                    self._event_floor = max(self._event_floor, seq)
            self._seen_events = {s: a for s, a in self._seen_events.items() if s > self._event_floor}
            return fresh

        return self._reader.submit(events)

    def node_counts(self) -> concurrent.futures.Future[dict[str, int]]:
        """Leases per node, pending ones included (they hold a place on it)."""
        return self._reader.submit(
            lambda db: {
                str(n): int(c) for n, c in db.execute("SELECT node, count(*) FROM leases GROUP BY node")
            }
        )

    def node_leases(self, node: str) -> concurrent.futures.Future[tuple[set[str], set[str]]]:
        """Container ids and lease ids recorded on a node (pending ones included): what reconciliation
        must not take for orphans, whichever replica allocated them."""

        def of(db: psycopg.Connection[Any]) -> tuple[set[str], set[str]]:
            rows = db.execute(
                "SELECT container_id, lease_id FROM leases WHERE node = %s OR container_id = ''", (node,)
            ).fetchall()
            return {c for c, _ in rows if c}, {lid for _, lid in rows}

        return self._reader.submit(of)

    # ---- snapshot records (`snapshots.Snapshots`): any replica restores or deletes any snapshot

    def put_snapshot(
        self, snapshot_id: str, expires_at: float, record: dict[str, Any]
    ) -> concurrent.futures.Future[None]:

        def put(db: psycopg.Connection[Any]) -> None:
            db.execute(
                "INSERT INTO pool_snapshots VALUES (%s, %s, %s) ON CONFLICT (snapshot_id) DO UPDATE"
                " SET record = excluded.record, expires_at = excluded.expires_at",
                (snapshot_id, expires_at, json.dumps(record)),
            )

        return self._writer.submit(put)

    def get_snapshot(self, snapshot_id: str) -> concurrent.futures.Future[dict[str, Any] | None]:
        def get(db: psycopg.Connection[Any]) -> dict[str, Any] | None:
            row = db.execute(
                "SELECT record FROM pool_snapshots WHERE snapshot_id = %s", (snapshot_id,)
            ).fetchone()
            return None if row is None else dict(row[0])

        return self._reader.submit(get)

    def delete_snapshot(self, snapshot_id: str) -> concurrent.futures.Future[bool]:
        """Forget a snapshot; True for the one replica whose delete removed it."""
        return self._writer.submit(
            lambda db: (
                db.execute("DELETE FROM pool_snapshots WHERE snapshot_id = %s", (snapshot_id,)).rowcount > 0
            )
        )

    def expired_snapshots(self, now: float) -> concurrent.futures.Future[list[dict[str, Any]]]:
        """Delete and return the snapshot records past their expiry (each to exactly one replica)."""
        return self._writer.submit(
            lambda db: [
                dict(row[0])
                for row in db.execute(
                    "DELETE FROM pool_snapshots WHERE expires_at < %s RETURNING record", (now,)
                ).fetchall()
            ]
        )
