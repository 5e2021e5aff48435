"""What the pool shows of itself: /status (nodes, leases, totals) and /metrics (Prometheus text format).

Counters are kept incrementally by `Metrics`; gauges are read off the pool when rendered.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.pool import __version__

if TYPE_CHECKING:
    from swe_rl.fleet.pool.pool import Pool


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""

    def esc(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Upper bounds (seconds) of `swe_pool_overhead_seconds`: fine around the 10 ms goal, coarse above."""


class Histogram:
    """One Prometheus histogram: cumulative bucket counts, sum and count (quantiles with
    `histogram_quantile`, or `quantile` here)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        i = 0
        while i < len(self.bounds) and value > self.bounds[i]:
            i += 1
        self.counts[i] += 1
        self.sum += value
        self.count += 1

    def quantile(self, q: float) -> float:
        """The q-quantile, interpolated within its bucket as Prometheus does; 0 when empty."""
        if not self.count:
            return 0.0
        rank, seen, lower = q * self.count, 0, 0.0
        for i, n in enumerate(self.counts):
            upper = self.bounds[i] if i < len(self.bounds) else self.bounds[-1]
            if seen + n >= rank and n:
                return lower + (upper - lower) * (rank - seen) / n
            seen, lower = seen + n, upper
        return self.bounds[-1]

    def lines(self, name: str, labels: dict[str, str]) -> list[str]:
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            out.append(f"{name}_bucket{_labels({**labels, 'le': le})} {total}")
        out += [f"{name}_sum{_labels(labels)} {self.sum:g}", f"{name}_count{_labels(labels)} {self.count}"]
        return out


class Metrics:
    """Counters, latency sums and histograms in the Prometheus text format (no client library needed)."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.overhead: dict[str, Histogram] = {}
        """The pool's own time per routed call, by op (`observe_overhead`)."""

    def observe_overhead(self, op: str, seconds: float) -> None:
        """A routed call's time in the pool: its handling minus the node's reported time."""
        hist = self.overhead.get(op)
        if hist is None:
            hist = self.overhead[op] = Histogram(OVERHEAD_BUCKETS)
        hist.observe(max(0.0, seconds))

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0.0) + value

    def observe(self, op: str, seconds: float) -> None:
        self.inc("swe_pool_call_seconds_count", op=op)
        self.inc("swe_pool_call_seconds_sum", seconds, op=op)

    def render(self, gauges: list[tuple[str, dict[str, str], float]]) -> str:
        helps = {
            "swe_pool_leases_active": ("gauge", "Leases currently held."),
            "swe_pool_node_leases": ("gauge", "Leases per node."),
            "swe_pool_node_up": ("gauge", "1 if the node passes its health checks."),
            "swe_pool_allocations_total": ("counter", "Allocation requests by outcome."),
            "swe_pool_calls_total": ("counter", "Routed calls by op and outcome."),
            "swe_pool_leases_reclaimed_total": ("counter", "Leases reclaimed by the pool, by reason."),
            "swe_pool_call_seconds": ("summary", "Latency of pool calls by op."),
            "swe_pool_allocations_warm_total": ("counter", "Allocations served by a warm container."),
            "swe_pool_warm_requests_total": ("counter", "Warm targets sent to nodes, by outcome."),
            "swe_pool_warm_cancelled_total": (
                "counter",
                "Warm targets withdrawn after an allocate failed as a client error.",
            ),
            "swe_pool_destroys_total": ("counter", "Background destroys of released containers, by outcome."),
            "swe_pool_destroys_pending": ("gauge", "Released containers not destroyed yet."),
            "swe_pool_node_warm_dropped": (
                "gauge",
                "Warm specs a node dropped after repeated start failures.",
            ),
        }
        rows: dict[str, list[str]] = {}
        for name, labels, value in gauges:
            rows.setdefault(name, []).append(f"{name}{_labels(labels)} {value:g}")
        for (name, label_pairs), value in sorted(self.counters.items()):
            family = name.removesuffix("_count").removesuffix("_sum")
            rows.setdefault(family, []).append(f"{name}{_labels(dict(label_pairs))} {value:g}")
        out = []
        for family, lines in rows.items():
            kind, text = helps.get(family, ("untyped", family))
            out += [f"# HELP {family} {text}", f"# TYPE {family} {kind}", *lines]
        if self.overhead:
            name = "swe_pool_overhead_seconds"
            out += [
                f"# HELP {name} The pool's own time per routed call (handling minus the node's reported time).",
                f"# TYPE {name} histogram",
            ]
            for op, hist in sorted(self.overhead.items()):
                out += hist.lines(name, {"op": op})
        return "\n".join(out) + "\n"


IMAGE_GAUGES = ("bytes_used", "budget", "pulls", "pulls_failed", "pulls_joined", "pull_seconds", "evictions")
"""Image figures of each node's /healthz shown as `swe_pool_node_image_<key>` (node counters as gauges)."""


def status_of(pool: Pool, *, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
    """The pool's /status answer: every node, and the leases from `offset` (at most `limit`), in the
    order they were allocated; `leases_page` says where the next page starts (None after the last)."""
    now = time.monotonic()
    nodes = [
        {
            "url": n.url,
            "healthy": n.healthy,
            "draining": n.draining,
            "load": pool.load(n),
            "pending": n.pending,
            "cap": pool.cap(n),
            "failures": n.failures,
            "last_error": n.last_error,
            "last_health": n.last_health,
            "capacity": n.capacity,
            "memory_total": n.memory_total,
            "memory_available": n.memory_available,
            "cpus": n.cpus,
            "warm": n.warm,
            "warm_targets": sum(t[0] for t in n.warm_targets.values() if t[1] > now),
            "warm_dropped": n.warm_dropped,
            "images": None if n.images is None else len(n.images),
            "image_disk": {k: v for k, v in n.image_stats.items() if k != "pulling"},
            "pulling": len(n.image_stats.get("pulling") or ()),
        }
        for n in pool.nodes
    ]
    leases = [
        {
            "lease_id": lease.lease_id,
            "node": lease.node,
            "image": lease.image,
            "instance_id": lease.instance_id,
            "age": round(time.time() - lease.created, 3),
            "idle": round(now - lease.last_seen, 3),
            "in_flight": lease.in_flight,
            "lost": lease.lost,
        }
        for lease in itertools.islice(pool.leases.values(), offset, None if limit is None else offset + limit)
    ]
    total = len(pool.leases)
    following = offset + len(leases)
    return {
        "pool_id": pool.cfg.pool_id,
        "version": __version__,
        "lease_ttl": pool.cfg.lease_ttl,
        "nodes": nodes,
        "leases": leases,
        "leases_page": {
            "offset": offset,
            "count": len(leases),
            "next": following if following < total else None,
        },
        "totals": {
            "leases": total,
            "nodes_healthy": len(pool.nodes.healthy()),
            "nodes_total": len(nodes),
            "capacity": sum(n["cap"] for n in nodes),
            "free": sum(max(0, n["cap"] - n["load"]) for n in nodes if n["healthy"]),
        },
    }


def metrics_text(pool: Pool) -> str:
    """The pool's /metrics answer."""
    gauges: list[tuple[str, dict[str, str], float]] = [
        ("swe_pool_leases_active", {}, sum(1 for lease in pool.leases.values() if not lease.lost)),
        ("swe_pool_destroys_pending", {}, len(pool.destroys)),
    ]
    for n in pool.nodes:
        gauges.append(("swe_pool_node_leases", {"node": n.url}, pool.load(n)))
        gauges.append(("swe_pool_node_up", {"node": n.url}, 1 if n.healthy else 0))
        gauges.append(("swe_pool_node_warm_dropped", {"node": n.url}, n.warm_dropped))
        for key, count in n.direct_calls.items():  # calls lease holders made on the node itself
            op, _, outcome = key.partition(":")
            gauges.append(
                ("swe_pool_node_direct_calls", {"node": n.url, "op": op, "outcome": outcome}, count)
            )
        for key in IMAGE_GAUGES:
            value = n.image_stats.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauges.append((f"swe_pool_node_image_{key}", {"node": n.url}, value))
    return pool.metrics.render(gauges)
