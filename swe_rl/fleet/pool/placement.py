"""Where a lease goes and how warm containers are spread: pure functions of the nodes' state.

No I/O and no clock or randomness of their own (`now` and a random tie-breaker are passed in), so each
decision is unit-tested without HTTP. Placement prefers, among the nodes within `affinity_slack` of the
least loaded, those holding warm containers of the request, then those with the image pulled; a node's
cap is the smaller of the pool's and its own report. Warm targets follow the expected demand of one
exact request and are spread by free capacity.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from swe_rl.fleet.pool.nodes import Node
from swe_rl.fleet.protocol import ApiError

WarmKey = tuple[str, str]
"""(image, create options as sorted JSON): one exact request."""

WARM_OPTIONS = ("network", "memory", "cpus", "pids_limit", "workdir", "env", "baseline")
"""Create options that make two requests interchangeable: a warm container serves only its exact request
(`baseline`: warm for restores, the baseline recorded ahead; set by the pool on an allocate from a tree
snapshot and by `POST /warm` with it)."""


def warm_key(image: str, body: dict[str, Any]) -> WarmKey:
    return image, json.dumps({k: body[k] for k in WARM_OPTIONS if body.get(k) is not None}, sort_keys=True)


@dataclass(slots=True)
class Demand:
    """Leases of one exact request expected soon, by the hints of recent allocates."""

    remaining: int
    expires: float


def load(node: Node) -> int:
    """Leases on the node, allocations in flight included."""
    return node.pending + node.active


def cap(node: Node, max_per_node: int) -> int:
    """Leases this node takes at most: our cap, or the node's own when smaller."""
    return min(max_per_node, node.capacity) if node.capacity > 0 else max_per_node


def warm_at(node: Node, key: WarmKey, now: float) -> bool:
    """The node holds (or was asked to hold) warm containers of the request."""
    target = node.warm_targets.get(key)
    if target is not None and target[0] > 0 and target[1] > now:
        return True
    return node.warm.get(key[0], 0) > 0


def rank(
    node: Node,
    key: WarmKey,
    *,
    max_per_node: int,
    affinity_slack: float,
    now: float,
    tiebreak: float,
    prefer: str = "",
) -> tuple[Any, ...]:
    """Sort key of a candidate node: near-least-loaded first, then warm, then `prefer` (the node holding
    the snapshot a restore needs: no tarball to carry over), then image pulled, then headroom."""
    used = load(node) / cap(node, max_per_node)
    bucket = int(used / affinity_slack + 1e-9) if affinity_slack > 0 else used
    has_image = node.images is None or key[0] in node.images
    return (
        bucket,
        0 if warm_at(node, key, now) else 1,
        0 if prefer and node.url == prefer else 1,
        0 if has_image else 1,
        used,
        -node.memory_available,
        tiebreak,
    )


def pick_node(
    candidates: Iterable[Node],
    key: WarmKey,
    *,
    max_per_node: int,
    affinity_slack: float,
    now: float,
    rng: Callable[[], float] = random.random,
    prefer: str = "",
) -> Node:
    """The best of the candidates (which must be healthy and under their cap) for one allocate."""

    def key_of(n: Node) -> tuple[Any, ...]:
        return rank(
            n,
            key,
            max_per_node=max_per_node,
            affinity_slack=affinity_slack,
            now=now,
            tiebreak=rng(),
            prefer=prefer,
        )

    return min(candidates, key=key_of)


def next_demand(previous: int, expected: int | None, warm_min: int, *, override: bool) -> int:
    """Leases of a request still expected after an allocate (which consumes one) or a `POST /warm`
    (`override`: sets it)."""
    wanted = warm_min if expected is None else expected
    return wanted if override else max(previous - 1, wanted)


def current_targets(nodes: Iterable[Node], key: WarmKey, now: float) -> dict[str, int]:
    """Warm target of key per node as last sent; an expired one counts as none."""
    out = {}
    for n in nodes:
        t = n.warm_targets.get(key)
        out[n.url] = t[0] if t is not None and t[1] > now else 0
    return out


def spread(
    nodes: list[Node],
    old: dict[str, int],
    desired: int,
    *,
    max_per_node: int,
    warm_per_image: int,
    rng: Callable[[], float] = random.random,
) -> dict[str, int]:
    """New per-node warm targets of one request, moved from `old` towards a total of `desired`.

    Down nodes get none; what is added goes to the node with the most room (free slots under its cap
    and its own warm limit), what is taken comes from the node holding the most.
    """
    new = {n.url: old.get(n.url, 0) if n.healthy and not n.draining else 0 for n in nodes}

    def room(n: Node) -> int:  # warm slots this node can still take
        limit = n.max_warm if n.max_warm > 0 else warm_per_image
        return min(cap(n, max_per_node) - load(n), limit) - new[n.url]

    healthy = [n for n in nodes if n.healthy and not n.draining]
    total = sum(new.values())
    while total < desired:
        open_nodes = [n for n in healthy if room(n) > 0]
        if not open_nodes:
            break
        best = max(open_nodes, key=lambda n: (room(n), n.memory_available, rng()))
        new[best.url] += 1
        total += 1
    while total > desired:
        worst = max((n for n in nodes if new[n.url] > 0), key=lambda n: (new[n.url], -room(n)))
        new[worst.url] -= 1
        total -= 1
    return new


def placement_failure(
    image: str,
    *,
    network_full: list[str],
    full: int,
    missing: list[str],
    missing_network: str,
    errors: list[str],
    tried: bool,
    node_count: int,
    retry_after: float,
) -> ApiError:
    """Why no node took an allocate, as the answer the client gets, most telling reason first: a full
    network (507, at once, not retries to a deadline), every node at its cap (429), the image or a named
    network on no healthy node (404), no healthy node (503), every node's own error (503)."""
    if network_full and not full and not errors:
        return ApiError(
            507,
            "no free address on the container's network: " + "; ".join(network_full),
            network_full=True,
            nodes=[n.split(": ", 1)[0] for n in network_full],
        )
    if full:
        return ApiError(
            429,
            f"all nodes that might hold {image} are full ({full} at their cap)",
            headers={"Retry-After": str(retry_after)},
            retry_after=retry_after,
        )
    if missing and not errors:
        if missing_network:  # a named network the nodes allow but do not have: say so, not "image"
            return ApiError(
                404,
                f"{missing_network} (and on every other healthy node)",
                image=image,
                nodes=missing,
                network_missing=True,
            )
        return ApiError(404, f"image not found on any healthy node: {image}", image=image, nodes=missing)
    if not tried:
        return ApiError(503, f"no healthy exec server (of {node_count})", node_down=True)
    return ApiError(503, "allocation failed on every healthy node: " + "; ".join(errors), node_down=True)
