"""The pool: leases over the exec servers: allocate, heartbeat, close, reap, reconcile, warm demand.

Why it is built this way:
- Async (one event loop, shared HTTP clients): a one-hour evaluation is just an awaiting coroutine,
  it never blocks other calls.
- A lease is the unit clients hold: a container on one node, kept alive by heartbeats. Leases nobody
  heartbeats are reclaimed, so a crashed rollout worker leaks nothing.
- Leases are persisted in SQLite (`store`) and reconciled against each node's own list of containers at
  start and whenever a node comes back: containers labelled with our owner id that no lease knows are
  destroyed (a restart leaks nothing), leases whose container vanished are marked lost.
- Each allocate (or `POST /warm`) tells the nodes, fire-and-forget, how many containers of that exact
  request to keep started ahead (`placement` decides where, `warm_demand` tells them); a full fleet answers 429 with Retry-After
  (back-pressure, not failure).
- Scale: per-node lease counts and indexes are kept incrementally, so an allocate or a routed call
  costs the same with 10 leases or 10,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import sys
import time
from typing import Any

from starlette.responses import Response

from swe_rl.fleet.pool import placement
from swe_rl.fleet.pool.call_replay import CallReplay
from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.pool.credentials import PoolCredentials
from swe_rl.fleet.pool.liveness import LeaseLiveness
from swe_rl.fleet.pool.metrics import Metrics
from swe_rl.fleet.pool.nodes import Node, NodeSet
from swe_rl.fleet.pool.placement import Demand, WarmKey, placement_failure, warm_key
from swe_rl.fleet.pool.release import DestroyQueue
from swe_rl.fleet.pool.replicas import ReplicaSync, open_shared_store
from swe_rl.fleet.pool.routing import NodeCalls, forward, json_of
from swe_rl.fleet.pool.snapshots import Prepare, Snapshots
from swe_rl.fleet.pool.store import LeaseRecord, LeaseStore, LeaseTable, RecordStore
from swe_rl.fleet.pool.warm_demand import CREATE_OPTIONS, WarmDemand
from swe_rl.fleet.protocol import (
    FORWARDING,
    ROUTED_CALLS,
    AllocateRequest,
    ApiError,
    CloseRequest,
    parse,
    wire,
)

log = logging.getLogger("swe_pool_server")


class Pool(LeaseLiveness, WarmDemand):
    """Leases over the nodes: allocate, route, heartbeat, close, reap, reconcile."""

    def __init__(self, config: PoolConfig) -> None:
        self.cfg = config
        self.nodes = NodeSet(config.exec_urls, config.node_down_after)
        self.calls = NodeCalls(
            config.exec_urls,
            self.nodes,
            config.exec_token,
            connect_timeout=config.connect_timeout,
            shards=config.connection_shards,
            ca_file=config.exec_ca_file,
        )
        shared = open_shared_store(config.database_url) if config.database_url else None
        self.store: RecordStore = shared or LeaseStore(config.db_path)
        self.replicas = ReplicaSync(self, shared) if shared else None
        """Set when several replicas share a PostgreSQL record (`SWE_POOL_DATABASE_URL`): replicas.py."""
        self.metrics = Metrics()
        self.credentials = PoolCredentials(config)
        """Signs each lease's credential; its public key goes to the nodes (direct calls)."""
        self.replays = CallReplay(config.call_replay_seconds, config.call_replay_bytes)
        self.table = LeaseTable(self.store, self.nodes.nodes)
        self.leases, self.by_request, self.by_node = (
            self.table.leases,
            self.table.by_request,
            self.table.by_node,
        )
        self.allocations: dict[str, asyncio.Task[dict[str, Any]]] = {}
        """Allocations in flight by request id: a retry awaits the same one."""
        self._alloc_tasks: set[asyncio.Task[dict[str, Any]]] = set()
        self.allocating: set[str] = set()
        """Lease ids being created: reconciliation must not take their containers for orphans."""
        self.demand: dict[WarmKey, Demand] = {}
        self._background: set[asyncio.Task[Any]] = set()
        """Fire-and-forget calls (warm requests) in flight."""
        self._tasks: list[asyncio.Task[None]] = []
        self.destroys = DestroyQueue(self.calls.route_post, self.metrics)
        """Containers of released leases being destroyed in the background (off close's path)."""
        self.snapshots = Snapshots(self, self.replicas.store if self.replicas else None)
        self.first_pass: asyncio.Task[None] | None = None
        """The first check of every node, run while the pool already serves (see `start`)."""

    # ---- lifecycle

    async def start(self) -> None:
        """Load every lease, then serve while each node gets its first check and reconciliation.

        Nothing waits for the whole fleet: a call on a lease waits only for its own node's first check
        (`Node.checked`), and allocations and fleet-wide calls wait for the first pass over every node
        (`whole_fleet_checked`). One slow or dead node of 200 no longer holds 20,000 leases up.
        """
        t0 = time.monotonic()
        self.calls.open()
        now = time.monotonic()
        for lease in self.store.load():
            lease.last_seen = now
            self._add(lease)
        log.info(
            "pool %s: %d leases loaded from %s in %.2f s; serving while %d nodes are checked",
            self.cfg.pool_id,
            len(self.leases),
            "the shared PostgreSQL record" if self.replicas else self.cfg.db_path,
            time.monotonic() - t0,
            len(self.nodes.nodes),
        )
        self.first_pass = asyncio.create_task(self._first_pass(t0))

    async def _first_pass(self, t0: float) -> None:
        t1 = time.monotonic()
        await self.check_health()  # reconciles each reachable node; its held calls go on as it is done
        log.info(
            "pool %s: %d leases, %d of %d nodes healthy, ready after %.2f s (nodes %.2f s)",
            self.cfg.pool_id,
            len(self.leases),
            len(self.nodes.healthy()),
            len(self.nodes.nodes),
            time.monotonic() - t0,
            time.monotonic() - t1,
        )
        reap = (self.reap_expired, self.cfg.reap_interval)
        if self.replicas is not None:  # expiry runs in the shared record, each lease to one replica
            reap = (self.replicas.sync, self.cfg.sync_interval)
        for loop, interval in (
            (self.check_health_spread, self.cfg.health_interval / 2),  # a node every health_interval
            reap,
            (self.touch_live, self.cfg.effective_touch_interval),
            (self.snapshots.reap, self.cfg.reap_interval),
        ):
            self._tasks.append(asyncio.create_task(self._every(interval, loop)))

    @property
    def ready(self) -> bool:
        """Every node has had its first check since the start."""
        return self.first_pass is not None and self.first_pass.done()

    async def whole_fleet_checked(self) -> None:
        """Wait for the first pass over every node (placement must see the whole fleet)."""
        if self.first_pass is not None and not self.first_pass.done():
            await asyncio.wait([self.first_pass])

    async def stop(self) -> None:
        if self.first_pass is not None:
            self.first_pass.cancel()
            await asyncio.gather(self.first_pass, return_exceptions=True)
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        if self._alloc_tasks:  # let them finish, so their containers are released below
            await asyncio.wait(list(self._alloc_tasks), timeout=60)
        if not self.cfg.keep_leases_on_exit:
            await self._cancel_warm_targets()
            leases = list(self.leases.values())
            for lease in leases:
                self._release(lease, "shutdown")
            destroyed = await self.destroys.drain(max(30.0, self.cfg.shutdown_grace))
            self.store.clear()
            log.info("shutdown: released %d leases (%d containers destroyed)", len(leases), destroyed)
        else:
            await self.destroys.drain(max(30.0, self.cfg.shutdown_grace))
        self.store.close()
        await self.calls.aclose()

    async def _every(self, interval: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()
            except Exception:  # a background loop must outlive any one bad pass
                log.exception("background pass %s failed", fn.__name__)

    # ---- bookkeeping (the table keeps the indexes, the record and the nodes' counts in step)

    def _add(self, lease: LeaseRecord) -> None:
        self.table.add(lease)

    def _drop(self, lease: LeaseRecord) -> None:
        self.table.drop(lease)

    def _mark_lost(self, lease: LeaseRecord, reason: str) -> None:
        """The container is gone: keep a tombstone so calls get a clear 410 until close or TTL."""
        if self.table.mark_lost(lease, reason):
            log.warning("lease %s lost: %s", lease.lease_id, reason)
            self.metrics.inc("swe_pool_leases_reclaimed_total", reason="container_gone")

    def load(self, node: Node) -> int:
        return placement.load(node)

    def cap(self, node: Node) -> int:
        return placement.cap(node, self.cfg.max_per_node)

    def lease_of(self, body: dict[str, Any], *, allow_lost: bool = False) -> LeaseRecord:
        return self.table.of(body, allow_lost=allow_lost)

    async def known(self, body: dict[str, Any]) -> None:
        """With replicas: load the leases the request names that another replica allocated."""
        if self.replicas is not None:
            await self.replicas.load_body(body)

    async def beat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A heartbeat (`heartbeat`), after loading its leases when another replica allocated them."""
        await self.known(body)
        return self.heartbeat(body)

    async def recorded_on(self, node_url: str) -> tuple[set[str], set[str]]:
        """Containers and lease ids other replicas hold on the node (none without replicas)."""
        return await self.replicas.recorded_on(node_url) if self.replicas else (set(), set())

    async def still_recorded(self, leases: list[LeaseRecord]) -> list[LeaseRecord]:
        """Of leases whose container is gone, those not released meanwhile through another replica."""
        return await self.replicas.still_recorded(leases) if self.replicas else leases

    def _post(self, node: Node, path: str, payload: dict[str, Any], timeout: float) -> Any:
        return self.calls.post(node, path, payload, timeout)

    def _release(self, lease: LeaseRecord, reason: str) -> asyncio.Task[bool]:
        """Forget a lease now; its container is destroyed right after, in the background, until it is gone."""
        self._drop(lease)
        log.info(
            "lease %s released (%s); destroying container %s on %s",
            lease.lease_id,
            reason,
            lease.container_id[:12],
            lease.node,
        )
        return self.destroys.submit(self.nodes.get(lease.node), lease.container_id)

    # ---- allocate

    async def allocate(self, body: dict[str, Any]) -> dict[str, Any]:
        await self.whole_fleet_checked()
        try:
            result = await self._allocate_once(body)
        except ApiError as exc:
            outcome = {404: "image_not_found", 429: "full", 503: "no_node"}.get(exc.status, "error")
            self.metrics.inc(
                "swe_pool_allocations_total",
                outcome="bad_request" if exc.status in (400, 403, 422) else outcome,
            )
            raise
        self.metrics.inc("swe_pool_allocations_total", outcome="ok")
        return self.credentials.grant(result)  # the lease's own credential: every call on it needs it

    async def renew_credential(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /credential`: a fresh credential for a live lease (the app checked the one it came with)."""
        lease = self.lease_of(body)
        lease.touch()
        return self.credentials.renew(lease.public(self.cfg.lease_ttl))

    async def _allocate_once(self, body: dict[str, Any]) -> dict[str, Any]:
        """Run one allocation per request id: a retry gets the lease, or awaits the allocation in flight."""
        # allocate from a snapshot: the snapshot's image and workdir fill the body (404/403/409 first)
        await self.snapshots.known(body.get("from_snapshot"))  # (with replicas: one another replica took)
        snap = self.snapshots.for_allocate(body) if body.get("from_snapshot") is not None else None
        req: AllocateRequest = parse(AllocateRequest, body)
        request_id = req.request_id
        if request_id and request_id in self.by_request:
            return self.leases[self.by_request[request_id]].public(self.cfg.lease_ttl)
        if request_id and request_id in self.allocations:
            return await asyncio.shield(self.allocations[request_id])
        task = asyncio.create_task(
            self._allocate(req) if snap is None else self.snapshots.allocate_from(snap, req)
        )
        self._alloc_tasks.add(task)
        task.add_done_callback(self._allocation_done)
        if request_id:
            self.allocations[request_id] = task
        return await asyncio.shield(task)  # a dropped connection must not leave a half-made lease

    def _allocation_done(self, task: asyncio.Task[dict[str, Any]]) -> None:
        self._alloc_tasks.discard(task)
        for rid, t in list(self.allocations.items()):
            if t is task:
                del self.allocations[rid]
        if not task.cancelled():
            task.exception()  # retrieved here: its caller may have gone away

    async def allocate_then(
        self,
        req: AllocateRequest,
        prepare: Prepare,
        *,
        pin: tuple[str, str] | None = None,
        prefer: str = "",
        what: str,
    ) -> dict[str, Any]:
        """Allocate a lease (on `pin`'s node and image when given; `prefer`: that node among equals),
        then `prepare` it before its answer leaves; when `what` (the preparation) fails the lease is
        released and the error raised. The allocate from a snapshot (`Snapshots.allocate_from`: a
        restore) is one."""
        info = await self._allocate(req, pin, prefer)
        lease = self.leases[info["lease_id"]]
        try:
            extra = await prepare(lease)
        except BaseException:
            self._release(lease, f"{what} failed")
            raise
        return {**info, **extra}

    async def _allocate(
        self, req: AllocateRequest, pin: tuple[str, str] | None = None, prefer: str = ""
    ) -> dict[str, Any]:
        (node_url, create_image), image, lease_id = pin or (None, None), req.image, secrets.token_urlsafe(16)
        payload: dict[str, Any] = {  # a node's CreateRequest
            "image": create_image or image,
            "lease_id": lease_id,
            "owner": self.cfg.pool_id,
            "idle_ttl": self.cfg.idle_ttl,
            **wire(req, include=CREATE_OPTIONS),
        }
        if req.from_snapshot is not None and pin is None:  # a tree snapshot's restore: baseline ahead
            payload["baseline"] = True
        key = warm_key(image, payload)
        if pin is None:  # fire-and-forget, before our own create (no warm containers of a snapshot)
            self._plan_warm(key, payload, req.expected)
        if self.replicas is not None:  # a pending row first: no replica takes its container for an orphan
            made = await self.replicas.reserve(lease_id, req)
            if made is not None:  # a retry of an allocate another replica made: its lease
                return made.public(self.cfg.lease_ttl)
            try:
                return await self._place(req, lease_id, payload, key, node_url, image, prefer)
            finally:
                if lease_id not in self.leases:
                    self.store.delete(lease_id)
        return await self._place(req, lease_id, payload, key, node_url, image, prefer)

    async def _place(
        self,
        req: AllocateRequest,
        lease_id: str,
        payload: dict[str, Any],
        key: WarmKey,
        node_url: str | None,
        image: str,
        prefer: str,
    ) -> dict[str, Any]:
        """Create the lease's container on the best node that takes it (the next one when one fails)."""
        tried: set[str] = set()
        missing: list[str] = []
        errors: list[str] = []
        full: set[str] = set()
        missing_network = ""
        network_full: list[str] = []  # nodes whose network for it has no free address
        while True:
            candidates = [
                n for n in self.nodes.placeable() if n.url not in tried and node_url in (None, n.url)
            ]
            full.update(n.url for n in candidates if self.load(n) >= self.cap(n))
            candidates = [n for n in candidates if self.load(n) < self.cap(n)]
            if not candidates:
                break
            node = placement.pick_node(
                candidates,
                key,
                max_per_node=self.cfg.max_per_node,
                affinity_slack=self.cfg.affinity_slack,
                now=time.monotonic(),
                prefer=prefer,
            )
            tried.add(node.url)
            node.pending += 1
            self.allocating.add(lease_id)
            try:
                resp = await self.calls.route_post(node, "/container/create", payload, 600.0)
                data = json_of(resp)
                if resp.status_code == 200:
                    lease = LeaseRecord(  # images and workdirs repeat: one string each, not one per lease
                        lease_id,
                        req.request_id,
                        node.url,
                        data["container_id"],
                        sys.intern(image),
                        req.instance_id,
                        sys.intern(data.get("workdir") or "/testbed"),
                        time.time(),
                        warm=data.get("warm") is True,
                        owner=req.owner or "",
                        image_id=sys.intern(str(data.get("image_id") or "")),
                    )
                    self._add(lease)
                    await asyncio.wrap_future(self.store.put(lease))  # written on the store's thread
                    if lease.warm:
                        self.metrics.inc("swe_pool_allocations_warm_total")
                    log.info("lease %s: %s on %s (warm=%s)", lease_id, image, node.url, lease.warm)
                    return lease.public(self.cfg.lease_ttl)
            except ApiError as exc:
                errors.append(f"{node.url}: {exc.message}")
                continue
            finally:
                node.pending -= 1
                self.allocating.discard(lease_id)
            message = str(data.get("error", resp.text[:200]))
            if resp.status_code == 404:
                missing.append(node.url)
                if data.get("network_missing"):
                    missing_network = message
            elif resp.status_code == 429:
                full.add(node.url)
            elif data.get("network_full"):
                network_full.append(f"{node.url}: {message}")
            elif 400 <= resp.status_code < 500:  # the request's fault: same on every node
                self._cancel_warm(key, payload)  # nothing may keep starting for a spec that cannot start
                extra = {k: v for k, v in data.items() if k not in ("error", "node", "node_down")}
                raise ApiError(resp.status_code, message, node=node.url, **extra)
            else:
                errors.append(f"{node.url}: {resp.status_code} {message}")
        if missing and not errors and not full and not network_full:  # the 404 below: no warm start either
            self._cancel_warm(key, payload)
        raise placement_failure(
            image,
            network_full=network_full,
            full=len(full),
            missing=missing,
            missing_network=missing_network,
            errors=errors,
            tried=bool(tried),
            node_count=len(self.nodes.nodes),
            retry_after=self.cfg.retry_after,
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- routed calls

    async def route(self, op: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | Response:
        """Check the call against its model (as the node will), then forward the body as it came."""
        await self.known(body)
        lease = self.lease_of(body)
        parse(ROUTED_CALLS[op], body, FORWARDING)
        return await forward(
            self.calls,
            self.nodes.get(lease.node),
            lease,
            op,
            body,
            call_margin=self.cfg.call_margin,
            on_lost=self._mark_lost,
        )

    # ---- close

    async def close(self, body: dict[str, Any]) -> dict[str, Any]:
        req: CloseRequest = parse(CloseRequest, body)
        request_id = req.request_id
        if request_id and not req.lease_id:  # a client cancelled mid-allocate releases by request id
            if request_id in self.allocations:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.allocations[request_id])
            if request_id not in self.by_request and self.replicas is not None:
                with contextlib.suppress(ApiError):  # (one under way on another replica: its TTL reclaims it)
                    await self.replicas.load_request(request_id)
            if request_id not in self.by_request:
                return {"ok": True, "already_closed": True}
            body = {"lease_id": self.by_request[request_id]}
        await self.known(body)
        try:
            lease = self.lease_of(body, allow_lost=True)
        except ApiError as exc:
            if exc.status == 404:
                return {"ok": True, "already_closed": True}
            raise
        node = self.nodes.get(lease.node)
        self._release(lease, "close")
        if node.healthy:
            return {"ok": True, "released": True}
        return {
            "ok": True,
            "released": True,
            "node_down": True,
            "message": f"node {node.url} unreachable: lease released, its container is destroyed when the node "
            "returns (or by the node's reaper)",
        }
