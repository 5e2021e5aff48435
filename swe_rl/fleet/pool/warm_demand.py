"""Warm demand, the half of the pool that tells the nodes what to keep started ahead.

Each allocate (or `POST /warm`) updates the demand of its exact create request and spreads a warm
target over the nodes by free capacity (`placement` decides the numbers); the changes go to the nodes
fire-and-forget, never on the allocate's path. A request that fails as a client error withdraws its
targets, and a graceful stop cancels every target sent. `Pool` (``pool.py``) inherits these calls;
the attributes they read are declared below.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.pool import placement
from swe_rl.fleet.pool.placement import WARM_OPTIONS, Demand, WarmKey, warm_key
from swe_rl.fleet.protocol import ApiError, PoolWarmRequest, parse, wire

if TYPE_CHECKING:
    from swe_rl.fleet.pool.config import PoolConfig
    from swe_rl.fleet.pool.metrics import Metrics
    from swe_rl.fleet.pool.nodes import Node, NodeSet

log = logging.getLogger("swe_pool_server")


CREATE_OPTIONS = set(WARM_OPTIONS)
"""The fields of an allocate or warm request the pool passes on to a node's create or warm."""


class WarmDemand:
    """Warm targets of `Pool` over the nodes (a base class: the pool supplies the state)."""

    cfg: PoolConfig
    nodes: NodeSet
    metrics: Metrics
    demand: dict[WarmKey, Demand]

    async def whole_fleet_checked(self) -> None:
        raise NotImplementedError

    def _post(self, node: Node, path: str, payload: dict[str, Any], timeout: float) -> Any:
        raise NotImplementedError

    def _spawn(self, coro: Any) -> None:
        raise NotImplementedError

    async def _cancel_warm_targets(self) -> None:
        """Tell the nodes to stop refilling what we asked for (what is warm still expires with its TTL)."""
        calls = []
        for node in self.nodes.healthy():
            for (image, options), _ in list(node.warm_targets.items()):
                body = {"image": image, **json.loads(options), "count": 0}
                calls.append(self._post(node, "/warm", body, 5.0))
            node.warm_targets.clear()
        await asyncio.gather(*calls, return_exceptions=True)

    def _plan_warm(
        self, key: WarmKey, payload: dict[str, Any], expected: int | None, *, override: bool = False
    ) -> dict[str, int]:
        """Update the demand of one exact request and spread its warm target over the nodes.

        Never waits: the nodes are told in the background. An allocate consumes one expected lease;
        `expected` (default warm_min) raises the demand; `override` (POST /warm) sets it.
        """
        now = time.monotonic()
        d = self.demand.get(key)
        previous = d.remaining if d is not None and d.expires > now else 0
        remaining = placement.next_demand(previous, expected, self.cfg.warm_min, override=override)
        if remaining <= 0:
            self.demand.pop(key, None)
        else:
            self.demand[key] = Demand(remaining, now + self.cfg.warm_ttl)
        if remaining <= 0 and previous <= 0 and not any(key in n.warm_targets for n in self.nodes):
            return {}
        return self._spread(key, payload, min(remaining, self.cfg.warm_per_image), now)

    def _spread(self, key: WarmKey, payload: dict[str, Any], desired: int, now: float) -> dict[str, int]:
        """Move the per-node targets of key towards a total of `desired`, by free capacity; send the changes."""
        nodes = list(self.nodes)
        for n in nodes:
            t = n.warm_targets.get(key)
            if t is not None and t[1] <= now:
                del n.warm_targets[key]
        old = placement.current_targets(nodes, key, now)
        new = placement.spread(
            nodes, old, desired, max_per_node=self.cfg.max_per_node, warm_per_image=self.cfg.warm_per_image
        )
        body = {**payload, "ttl": self.cfg.warm_ttl}
        body.pop("lease_id", None), body.pop("owner", None), body.pop("idle_ttl", None)
        for n in nodes:
            count = new[n.url]
            previous = n.warm_targets.get(key)
            renew = previous is not None and previous[1] - now < self.cfg.warm_ttl / 2
            if count == old[n.url] and not renew:
                continue
            if count == 0:
                n.warm_targets.pop(key, None)
            else:
                n.warm_targets[key] = (count, now + self.cfg.warm_ttl)
            if n.healthy:
                self._spawn(self._send_warm(n, key, {**body, "count": count}))
        return {url: c for url, c in new.items() if c}

    async def _send_warm(self, node: Node, key: tuple[str, str], body: dict[str, Any]) -> None:
        try:
            resp = await self._post(node, "/warm", body, 30.0)
            ok = resp.status_code == 200
            if not ok:
                log.info("warm request to %s answered %d: %s", node.url, resp.status_code, resp.text[:200])
        except ApiError as exc:
            ok = False
            log.info("warm request to %s failed: %s", node.url, exc.message)
        self.metrics.inc("swe_pool_warm_requests_total", outcome="ok" if ok else "error")
        if not ok:  # forget it: the next allocate of the request asks again
            node.warm_targets.pop(key, None)

    def _cancel_warm(self, key: tuple[str, str], payload: dict[str, Any]) -> None:
        """Withdraw the warm targets of a request that failed as a client error (sent to the nodes at once)."""
        self.demand.pop(key, None)
        if any(key in n.warm_targets for n in self.nodes):
            self._spread(key, payload, 0, time.monotonic())
            self.metrics.inc("swe_pool_warm_cancelled_total")

    async def warm(self, body: dict[str, Any]) -> dict[str, Any]:
        """Ask the fleet to keep `count` containers of this exact request started ahead (0 cancels)."""
        await self.whole_fleet_checked()
        req: PoolWarmRequest = parse(PoolWarmRequest, body)
        payload: dict[str, Any] = {"image": req.image, **wire(req, include=CREATE_OPTIONS)}
        nodes = self._plan_warm(warm_key(req.image, payload), payload, req.count, override=True)
        return {
            "ok": True,
            "image": req.image,
            "count": min(req.count, self.cfg.warm_per_image),
            "nodes": nodes,
        }
