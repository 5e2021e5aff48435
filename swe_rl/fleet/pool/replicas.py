"""What one pool replica does so that several share a PostgreSQL lease record (`shared_store`).

Each replica keeps in memory only what it can rebuild or learn again from the database:
- its cache of leases: a lease another replica allocated is loaded on the first call that names it
  (`load`, `load_request`), and dropped when another replica releases it (the record's events, `sync`);
- liveness: heartbeats and calls touch the cached lease in memory; `sync` pushes the touched ones (and
  those with a call in flight, or being allocated) to the database every `sync_interval`, and expiry runs
  there, each expired lease handed to exactly one replica, which destroys its container;
- node loads: set from the database's count per node on every pass (placement between two passes also
  counts this replica's own allocations; the node's own capacity answer, 429, is the hard limit);
- reconciliation asks the database which containers and lease ids a node holds (`recorded_on`), so no
  replica destroys a lease's container it does not know, or one another replica is creating.
Nothing here runs a query on the event loop: every store call is awaited on the store's threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.pool.store import LeaseRecord
from swe_rl.fleet.protocol import AllocateRequest, ApiError

if TYPE_CHECKING:
    from swe_rl.fleet.pool.pool import Pool
    from swe_rl.fleet.pool.shared_store import SharedLeaseStore

log = logging.getLogger("swe_pool_server")


def open_shared_store(url: str) -> SharedLeaseStore:
    """The replicas' PostgreSQL record (psycopg is the `replicas` extra: imported only when asked for)."""
    from swe_rl.fleet.pool.shared_store import SharedLeaseStore

    return SharedLeaseStore(url)


class ReplicaSync:
    """One replica's link to the shared lease record (made by the pool when it has a database URL)."""

    def __init__(self, pool: Pool, store: SharedLeaseStore) -> None:
        self.pool, self.store = pool, store
        self.pushed_at = time.monotonic()
        self.expired = 0
        """Leases this replica expired (the others expired theirs)."""

    @property
    def interval(self) -> float:
        return self.pool.cfg.sync_interval

    # ---- leases another replica allocated

    async def load(self, lease_ids: list[str]) -> None:
        """Put the named leases this replica does not know into its cache, from the database."""
        missing = [lid for lid in lease_ids if lid not in self.pool.leases]
        if not missing:
            return
        now = time.monotonic()
        for lease in await asyncio.wrap_future(self.store.fetch(missing)):
            if lease.lease_id not in self.pool.leases and lease.node in self.pool.nodes.nodes:
                lease.last_seen = now
                self.pool.table.add(lease)

    async def load_body(self, body: dict[str, Any]) -> None:
        """The leases a request names (`lease_id`, or a batch heartbeat's `lease_ids`)."""
        ids = body.get("lease_ids")
        if not isinstance(ids, list):
            ids = [body.get("lease_id")]
        await self.load([i for i in ids if isinstance(i, str) and i])

    async def load_request(self, request_id: str) -> LeaseRecord | None:
        """The lease another replica made for an allocate's request id (a client retrying on this one);
        503 while that allocation is still under way there (the client retries the allocate)."""
        lease, exists = await asyncio.wrap_future(self.store.by_request(request_id))
        if lease is None and exists:
            raise ApiError(503, f"request {request_id} is being allocated by another pool replica: retry")
        if lease is not None and lease.lease_id not in self.pool.leases:
            lease.last_seen = time.monotonic()
            self.pool.table.add(lease)
        return self.pool.leases.get(lease.lease_id) if lease is not None else None

    async def reserve(self, lease_id: str, req: AllocateRequest) -> LeaseRecord | None:
        """Record an allocation before its container is made (a pending row: reconciliation on any
        replica leaves its container alone). When another replica made the request's lease already (a
        client retrying here), that lease; 503 while it is still making it."""
        pending = LeaseRecord(lease_id, req.request_id, "", "", req.image, req.instance_id, "", time.time(),
                              owner=req.owner or "")  # fmt: skip
        self.pool.allocating.add(lease_id)
        try:
            other = await asyncio.wrap_future(self.store.reserve(pending))
        finally:
            self.pool.allocating.discard(lease_id)
        if other is None:
            return None
        assert req.request_id is not None  # (only a request id can collide)
        made = await self.load_request(req.request_id)  # 503 while the other replica is still making it
        if made is None:  # released again since: the client's retry allocates anew
            raise ApiError(503, f"request {req.request_id} was just released by another pool replica: retry")
        return made

    async def still_recorded(self, leases: list[LeaseRecord]) -> list[LeaseRecord]:
        """Of cached leases whose container the node no longer has, those still in the record; the others
        were released through another replica (which destroyed the container) before this one read its
        event: dropped from the cache, not marked lost."""
        if not leases:
            return []
        present = {
            le.lease_id for le in await asyncio.wrap_future(self.store.fetch([le.lease_id for le in leases]))
        }
        for lease in leases:
            if lease.lease_id not in present:
                self.pool.table.forget(lease.lease_id)
        return [lease for lease in leases if lease.lease_id in present]

    async def recorded_on(self, node_url: str) -> tuple[set[str], set[str]]:
        """Container ids and lease ids the database has on a node (allocations under way included)."""
        return await asyncio.wrap_future(self.store.node_leases(node_url))

    # ---- the periodic pass

    async def sync(self) -> None:
        """Push touches, expire (exactly once over the replicas), drop what others released, recount."""
        await self.push_touches()
        await self.expire()
        await self.apply_events()
        now = time.monotonic()
        for lease in [
            le for le in self.pool.leases.values() if le.lost and now - le.last_seen > self.pool.cfg.lease_ttl
        ]:
            self.pool.table.forget(lease.lease_id)  # a tombstone nobody asked about for a TTL
        counts = await asyncio.wrap_future(self.store.node_counts())
        for node in self.pool.nodes:
            node.active = counts.get(node.url, 0)

    async def push_touches(self) -> None:
        since, self.pushed_at = self.pushed_at, time.monotonic()
        ids = [
            lease.lease_id
            for lease in self.pool.leases.values()
            if not lease.lost and (lease.last_seen >= since or lease.in_flight > 0)
        ]
        ids += list(self.pool.allocating)  # their rows are pending: alive while this replica makes them
        for start in range(0, len(ids), 10_000):
            await asyncio.wrap_future(self.store.touch(ids[start : start + 10_000]))

    async def expire(self) -> None:
        """Take the leases idle past the TTL (one interval of slack: a touch reaches the database up to
        one interval late) and release them; a pending lease whose replica died goes too."""
        ttl = self.pool.cfg.lease_ttl + self.interval
        pending_ttl = max(15.0, 10 * self.interval)
        while True:
            records = await asyncio.wrap_future(self.store.expire(ttl, pending_ttl))
            for record in records:
                self.expired += 1
                self.pool.metrics.inc("swe_pool_leases_reclaimed_total", reason="ttl")
                lease = self.pool.leases.get(record.lease_id)
                reason = f"no heartbeat for {self.pool.cfg.lease_ttl:g}s"
                if lease is not None:
                    self.pool._release(lease, reason)
                elif record.node in self.pool.nodes.nodes:
                    log.info("lease %s expired (%s); destroying container %s", record.lease_id, reason,
                             record.container_id[:12])  # fmt: skip
                    self.pool.destroys.submit(self.pool.nodes.get(record.node), record.container_id)
                else:
                    log.warning("expired lease %s is on %s, a node this replica does not know",
                                record.lease_id, record.node)  # fmt: skip
            if len(records) < 1000:
                return

    async def apply_events(self) -> None:
        for lease_id, kind, reason in await asyncio.wrap_future(self.store.events()):
            self.pool.table.forget(lease_id, lost=reason or "container gone" if kind == "lost" else None)
