"""Lease liveness, the half of the pool that keeps its picture of the fleet true.

Heartbeats (one lease, or a client's whole batch), the node health passes, reconciliation of a node that
(re)joins, the TTL reaper and the touch pass that learns which containers died. A lease is only ever
lost on two answers of its node (`_still_missing`): one answer may have raced a create or a reaper pass.
`Pool` (``pool.py``) inherits these passes; the attributes they read are declared below.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx

from swe_rl.fleet.pool.nodes import Node, NodeSet, fetch_health, health_timeout, refresh_images
from swe_rl.fleet.pool.routing import json_of
from swe_rl.fleet.protocol import MAX_HEARTBEAT_BATCH, ApiError, HeartbeatRequest, parse

if TYPE_CHECKING:
    from swe_rl.fleet.pool.config import PoolConfig
    from swe_rl.fleet.pool.credentials import PoolCredentials
    from swe_rl.fleet.pool.metrics import Metrics
    from swe_rl.fleet.pool.routing import NodeCalls
    from swe_rl.fleet.pool.store import LeaseRecord

__all__ = ["MAX_HEARTBEAT_BATCH", "LeaseLiveness"]  # the batch limit is the protocol's

log = logging.getLogger("swe_pool_server")


class LeaseLiveness:
    """Heartbeats and the background passes of `Pool` (a base class: the pool supplies the state)."""

    cfg: PoolConfig
    calls: NodeCalls
    nodes: NodeSet
    metrics: Metrics
    leases: dict[str, LeaseRecord]
    by_node: dict[str, dict[str, LeaseRecord]]
    allocating: set[str]
    credentials: PoolCredentials

    def lease_of(self, body: dict[str, Any], *, allow_lost: bool = False) -> LeaseRecord:
        raise NotImplementedError

    def _post(self, node: Node, path: str, payload: dict[str, Any], timeout: float) -> Any:
        raise NotImplementedError

    def _mark_lost(self, lease: LeaseRecord, reason: str) -> None:
        raise NotImplementedError

    def _release(self, lease: LeaseRecord, reason: str) -> asyncio.Task[bool]:
        raise NotImplementedError

    async def recorded_on(self, node_url: str) -> tuple[set[str], set[str]]:
        raise NotImplementedError

    async def still_recorded(self, leases: list[LeaseRecord]) -> list[LeaseRecord]:
        raise NotImplementedError

    # ---- heartbeat

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        """Extend one lease (`lease_id`), or every lease of a client at once (`lease_ids`).

        A client holding hundreds of leases sends one request per interval instead of one per lease:
        at 20,000 leases and a 30 s interval that is tens of requests a second instead of ~670, and a
        request costs the pool far more than touching a lease.
        """
        req: HeartbeatRequest = parse(HeartbeatRequest, body)
        if req.lease_ids is not None:
            return self.heartbeat_many(req.lease_ids)
        lease = self.lease_of(body)
        lease.last_seen = time.monotonic()
        return {
            "ok": True,
            "expires_at": lease.public(self.cfg.lease_ttl)["expires_at"],
            "node_healthy": not self.nodes.get(lease.node).down,
        }

    def heartbeat_many(self, ids: list[str]) -> dict[str, Any]:
        """The batch heartbeat: every known, live lease is touched; the others are named in the answer."""
        now = time.monotonic()
        unknown: list[str] = []
        lost: dict[str, str] = {}
        node_down: list[str] = []
        for lease_id in ids:
            lease = self.leases.get(lease_id)
            if lease is None:
                unknown.append(lease_id)
            elif lease.lost:
                lost[lease_id] = lease.lost
            else:
                lease.last_seen = now
                if self.nodes.get(lease.node).down:
                    node_down.append(lease_id)
        return {
            "ok": True,
            "expires_at": round(time.time() + self.cfg.lease_ttl, 3),
            "unknown": unknown,
            "lost": lost,
            "node_down": node_down,
        }

    async def check_health(self, spread: float = 0.0) -> None:
        """Check every node once; their starts spread evenly over `spread` seconds (0: all at once).

        Why spread: the periodic pass started every node's check at once, and 200 checks kept the pool's
        event loop busy for 100-300 ms every interval, so every routed call in flight then waited behind
        them (the tail of the pool's overhead at scale, found by sampling the pool: docs/fleet.md, round
        six). The first pass after a start is not spread: calls wait for it."""
        nodes = list(self.nodes)

        async def one(i: int, node: Node) -> None:
            if spread > 0:
                await asyncio.sleep(spread * i / len(nodes))
            await self._check_node(node)

        await asyncio.gather(*(one(i, node) for i, node in enumerate(nodes)))

    async def check_health_spread(self) -> None:
        """The periodic pass: the checks spread over half the interval (the loop waits the other half)."""
        await self.check_health(spread=self.cfg.health_interval / 2)

    async def _check_node(self, node: Node) -> None:
        try:
            await self._check_node_once(node)
        finally:
            node.checked.set()  # calls on its leases held since the start go on (or fail fast: node down)

    async def _check_node_once(self, node: Node) -> None:
        wire = self.calls.health_wire_of(node.url, health_timeout(self.cfg.health_interval))
        ok, reason, timed_out = await fetch_health(wire, node, self.cfg.health_interval)
        http = self.calls.health_of(node.url)
        if not ok:
            self.nodes.failed(node, reason, slow=timed_out, cut_calls=not timed_out)
            return
        images_due = time.monotonic() - node.images_at > self.cfg.images_interval or not node.healthy
        if not node.healthy:
            try:  # a node that (re)joins is reconciled before it gets any work (its image list beside)
                await asyncio.gather(
                    self.reconcile(node), refresh_images(http, node) if images_due else asyncio.sleep(0)
                )
            except (ApiError, httpx.HTTPError, KeyError, TypeError) as exc:
                self.nodes.failed(node, f"reconciliation failed: {exc}")
                return
        elif images_due:
            await refresh_images(http, node)
        if self.credentials.node_needs_key(node):  # direct calls need our public key there (credentials.py)
            await self.credentials.give_key(node, self.calls.route_post)
        self.nodes.succeeded(node)

    async def reconcile(self, node: Node) -> None:
        """Destroy our containers no lease knows; mark leases whose container vanished as lost.

        The node's list is a picture of one moment, taken while allocations go on: a lease counts as lost
        only if it existed before the list was asked for, its container is absent from it, and the node
        says so a second time (`_still_missing`); a container counts as an orphan only if no lease knows it
        and no allocation is making it once the list is in.
        """
        assert self.calls.http is not None
        asked = [lease for lease in self.by_node.get(node.url, {}).values() if not lease.lost]
        resp = await self.calls.http.get(node.url + "/status", timeout=30.0)
        if resp.status_code != 200:
            raise ApiError(502, f"/status answered {resp.status_code}")
        containers = json_of(resp)["containers"]
        present = {c["id"] for c in containers}
        known = {lease.container_id for lease in self.by_node.get(node.url, {}).values()}
        # with replicas: what the shared record holds there, pending allocations of the others included
        recorded, recorded_ids = await self.recorded_on(node.url)
        known |= recorded
        for c in containers:
            if (
                c.get("owner") == self.cfg.pool_id
                and c["id"] not in known
                and c.get("lease_id") not in self.allocating
                and c.get("lease_id") not in recorded_ids
            ):
                log.info(
                    "reconcile: destroying orphan container %s (lease %r) on %s",
                    c["id"][:12],
                    c.get("lease_id"),
                    node.url,
                )
                await self._post(node, "/container/destroy", {"container_id": c["id"]}, 60.0)
                self.metrics.inc("swe_pool_leases_reclaimed_total", reason="orphan")
        absent = [lease for lease in asked if lease.container_id not in present]
        for lease in await self._still_missing(node, absent):
            self._mark_lost(lease, f"container {lease.container_id[:12]} no longer exists on {node.url}")

    async def _still_missing(self, node: Node, leases: list[LeaseRecord]) -> list[LeaseRecord]:
        """Of leases one answer of the node said have no container, those a second answer confirms.

        One answer is never enough to lose a lease: it may have raced a create or a reaper pass. Leases
        released or already lost meanwhile are left out; when the node cannot answer, none is confirmed
        (the next pass asks again).
        """
        if not leases:
            return []
        try:
            resp = await self._post(
                node, "/containers/touch", {"container_ids": [lease.container_id for lease in leases]}, 30.0
            )
            missing = set(json_of(resp).get("missing", [])) if resp.status_code == 200 else None
        except ApiError as exc:
            log.warning("re-check on %s failed: %s", node.url, exc.message)
            return []
        if missing is None:
            log.warning("re-check on %s answered %d", node.url, resp.status_code)
            return []
        confirmed = [
            lease
            for lease in leases
            if lease.container_id in missing and self.leases.get(lease.lease_id) is lease and not lease.lost
        ]
        if len(confirmed) < len(leases):
            log.info(
                "%d of %d containers reported missing on %s are there after all",
                len(leases) - len(confirmed),
                len(leases),
                node.url,
            )
        return await self.still_recorded(confirmed)

    async def reap_expired(self) -> None:
        now = time.monotonic()
        expired = [
            lease
            for lease in self.leases.values()
            if lease.in_flight == 0 and now - lease.last_seen > self.cfg.lease_ttl
        ]
        for lease in expired:
            if not lease.lost:
                self.metrics.inc("swe_pool_leases_reclaimed_total", reason="ttl")
        for lease in expired:
            self._release(lease, f"no heartbeat for {self.cfg.lease_ttl:g}s")

    async def touch_live(self) -> None:
        """Tell each node which containers are alive (its idle reaper spares them) and learn which died."""
        for node in self.nodes.healthy():
            leases = {
                lease.container_id: lease
                for lease in self.by_node.get(node.url, {}).values()
                if not lease.lost
            }
            if not leases:
                continue
            try:
                body = {"container_ids": list(leases), "report_used": True}
                resp = await self._post(node, "/containers/touch", body, 30.0)
                answer = json_of(resp) if resp.status_code == 200 else {}
                missing = answer.get("missing", [])
            except ApiError as exc:
                log.warning("touch on %s failed: %s", node.url, exc.message)
                continue
            for cid in answer.get("used") or []:  # called directly since the last touch: alive
                if cid in leases:
                    leases[cid].touch()
            absent = [leases[cid] for cid in missing if cid in leases]
            for lease in await self._still_missing(node, absent):
                self._mark_lost(lease, f"container {lease.container_id[:12]} no longer exists on {node.url}")
