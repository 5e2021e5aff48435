"""The exec servers as the pool sees them: each node's health and own figures, and the checks that keep them.

A node that fails `node_down_after` health checks in a row (or refuses a connection mid-call) is down:
no allocation goes there and calls on its leases fail fast, until its /healthz answers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from swe_rl.fleet.pool.node_wire import NodeWire, WireConnectTimeout, WireError, WireTimeout
from swe_rl.fleet.pool.routing import json_of
from swe_rl.fleet.protocol import ApiError

log = logging.getLogger("swe_pool_server")


@dataclass
class Node:
    """One exec server: up or down, its load counters, and the figures it reports on /healthz."""

    url: str
    healthy: bool = False
    """False until the first good health check (and reconciliation) at start."""
    failures: int = 0
    pending: int = 0
    """Allocations in flight to this node: counted in its load so the cap holds under bursts."""
    last_error: str = ""
    slow: bool = False
    """Down only because its health checks timed out (a starved node more often than a dead one): the
    calls of its leases are still tried, and a refused or reset connection fails them at once."""
    last_health: float = 0.0
    """Wall time of the last successful health check."""
    draining: bool = False
    """The node said it is stopping (SIGTERM, an update): no new container goes there, its leases' calls
    go on, and while it restarts they wait for it (`routing.forward`) instead of failing."""
    active: int = 0
    """Leases on this node whose container is not lost (kept incrementally by the pool)."""
    capacity: int = 0
    """Containers the node says it holds at most (0: unknown)."""
    memory_total: int = 0
    memory_available: int = 0
    cpus: int = 0
    max_warm: int = 0
    warm_dropped: int = 0
    """Warm specs the node dropped after failing to start them (its own count)."""
    warm: dict[str, int] = field(default_factory=dict)
    """Ready warm containers per image, as of the last health check."""
    images: frozenset[str] | None = None
    """Images the node has, refreshed every images_interval (None: unknown)."""
    images_at: float = 0.0
    warm_targets: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    """Warm target we last sent per request key: (count, monotonic expiry)."""
    image_stats: dict[str, Any] = field(default_factory=dict)
    """The node's image figures (bytes used, budget, pulls, evictions), as of the last health check."""
    lease_keys: list[str] = field(default_factory=list, repr=False)
    """Pool public keys the node trusts for direct calls, as of the last health check (credentials.py)."""
    direct_calls: dict[str, int] = field(default_factory=dict, repr=False)
    """The node's counts of direct calls by ``op:outcome``, as of the last health check (for /metrics)."""
    calls: set[asyncio.Task[Any]] = field(default_factory=set, repr=False)
    """The tasks of routed calls waiting on this node now (cut when it is found down: `NodeSet.failed`)."""
    cut: set[asyncio.Task[Any]] = field(default_factory=set, repr=False)
    """Those of `calls` cancelled because the node went down: they answer 503 node_down at once."""
    checked: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    """Set once the node's first check since the pool started is over (up and reconciled, or found down).
    The pool serves before every node is checked; a call on one of this node's leases waits for it."""

    @property
    def down(self) -> bool:
        """Checked and not up: calls on its leases fail fast (an unchecked node is not down, only unknown)."""
        return not self.healthy and self.checked.is_set()

    def report(self, health: dict[str, Any]) -> None:
        """Take the node's own figures from its /healthz answer."""

        def num(key: str) -> int:
            value = health.get(key)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

        self.capacity, self.memory_total, self.memory_available = (
            num("capacity"),
            num("memory_total"),
            num("memory_available"),
        )
        self.cpus, self.max_warm, self.warm_dropped = num("cpus"), num("max_warm"), num("warm_dropped")
        self.draining = health.get("draining") is True
        images = health.get("images")
        self.image_stats = images if isinstance(images, dict) else {}
        keys, direct = health.get("lease_keys"), health.get("direct_calls")
        self.lease_keys = [str(k) for k in keys] if isinstance(keys, list) else []
        self.direct_calls = (
            {str(k): v for k, v in direct.items() if isinstance(v, int)} if isinstance(direct, dict) else {}
        )
        warm = health.get("warm")
        self.warm = (
            {str(k): int(v) for k, v in warm.items() if isinstance(v, int)} if isinstance(warm, dict) else {}
        )


class NodeSet:
    """Health bookkeeping of the exec servers; knows nothing of leases."""

    def __init__(self, urls: list[str], down_after: int) -> None:
        self.nodes = {url: Node(url) for url in urls}
        self.down_after = down_after

    def __iter__(self) -> Any:
        return iter(self.nodes.values())

    def get(self, url: str) -> Node:
        return self.nodes[url]

    def healthy(self) -> list[Node]:
        return [n for n in self if n.healthy]

    def placeable(self) -> list[Node]:
        """Up and not draining: where a new container (or a warm one) may go."""
        return [n for n in self if n.healthy and not n.draining]

    def failed(
        self,
        node: Node,
        reason: str,
        *,
        immediately: bool = False,
        slow: bool = False,
        cut_calls: bool = False,
    ) -> None:
        """Count a failed check or call; the node is down after `down_after` (or at once). `cut_calls`:
        a node found down by an answer (its /healthz says it is unhealthy, or refuses the connection),
        not by a timeout, fails the calls waiting on it now: a hung daemon holds them until their own
        timeout otherwise (an exec of 20 s answered 504 after 50 s)."""
        node.failures += 1
        node.last_error, node.slow = reason, slow
        if node.healthy and (immediately or node.failures >= self.down_after):
            node.healthy = False
            log.warning("node %s is down: %s", node.url, reason)
            if cut_calls and not slow and not node.draining and node.calls:
                log.warning(
                    "node %s: failing its %d call(s) in flight (node_down)", node.url, len(node.calls)
                )
                for task in list(node.calls):
                    node.cut.add(task)
                    task.cancel()

    def succeeded(self, node: Node) -> None:
        if not node.healthy:
            log.info("node %s is up", node.url)
        node.healthy, node.failures, node.last_health, node.slow = True, 0, time.time(), False


def health_timeout(health_interval: float) -> float:
    """Seconds a health check may take (connecting included)."""
    return min(5.0, max(1.0, health_interval))


async def fetch_health(wire: NodeWire, node: Node, health_interval: float) -> tuple[bool, str, bool]:
    """GET the node's /healthz: ok, the reason when not, and whether it only timed out. On success its
    figures are taken into `node` (up/down is the caller's)."""
    try:
        resp = await wire.get("/healthz", timeout=health_timeout(health_interval))
        health = json_of(resp)
        ok = resp.status_code == 200 and health.get("ok") is True
        reason = "" if ok else f"/healthz answered {resp.status_code}"
    except (WireError, ApiError) as exc:
        timed_out = isinstance(exc, (WireTimeout, WireConnectTimeout))
        return False, f"/healthz failed: {type(exc).__name__}: {exc}", timed_out
    if ok:
        node.report(health)
    return ok, reason, False


async def refresh_images(http: httpx.AsyncClient, node: Node) -> None:
    """Learn which images the node has (for image affinity); None when it does not say."""
    try:
        resp = await http.get(node.url + "/images", timeout=30.0)
        images = json_of(resp).get("images") if resp.status_code == 200 else None
    except (httpx.HTTPError, ApiError) as exc:
        log.info("image list of %s unavailable: %s", node.url, exc)
        images = None
    node.images = frozenset(str(i) for i in images) if isinstance(images, list) else None
    node.images_at = time.monotonic()
