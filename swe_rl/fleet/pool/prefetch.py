"""Prefetch: the pool's `POST /prefetch` turned into pulls on the nodes that will most likely get the leases.

`plan` is a pure function: it places the expected leases of each image as allocate would (placement's
ranking, a virtual load per node so they spread like a burst), and a node that lacks the image is asked
to pull it ahead (`POST /images/prefetch`, fire-and-forget). Those nodes count as holding the image from
then on, so placement sends the leases where the pull went.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.checks import InvalidRequest
from swe_rl.fleet.image_protocol import ImageCount, PrefetchAnswer, PrefetchRequest, parse
from swe_rl.fleet.pool import placement
from swe_rl.fleet.pool.nodes import Node
from swe_rl.fleet.protocol import ApiError

if TYPE_CHECKING:
    from swe_rl.fleet.pool.pool import Pool

log = logging.getLogger("swe_pool_server")


def plan(
    nodes: list[Node],
    wanted: list[ImageCount],
    *,
    max_per_node: int,
    affinity_slack: float,
    now: float,
    rng: Callable[[], float] = random.random,
) -> dict[str, list[str]]:
    """Images each node should pull: where `count` allocates of each image would land, if missing there."""
    healthy = [n for n in nodes if n.healthy]
    extra = {n.url: 0 for n in healthy}
    holds = {n.url: set(n.images or ()) for n in healthy}
    out: dict[str, list[str]] = {}
    for item in wanted:
        for _ in range(item.count):
            open_nodes = [
                n for n in healthy if placement.load(n) + extra[n.url] < placement.cap(n, max_per_node)
            ]
            if not open_nodes:
                break

            def key_of(n: Node) -> tuple[Any, ...]:  # placement.rank's order, with this plan's loads
                used = (placement.load(n) + extra[n.url]) / placement.cap(n, max_per_node)
                bucket = int(used / affinity_slack + 1e-9) if affinity_slack > 0 else used
                has = 0 if item.image in holds[n.url] else 1  # noqa: B023 - used within this iteration
                return (bucket, has, used, -n.memory_available, rng())

            best = min(open_nodes, key=key_of)
            extra[best.url] += 1
            if item.image not in holds[best.url]:
                holds[best.url].add(item.image)
                out.setdefault(best.url, []).append(item.image)
    return out


async def prefetch(pool: Pool, body: dict[str, Any]) -> dict[str, Any]:
    """`POST /prefetch`: ask the likely nodes to pull the images; answers without waiting for the pulls."""
    try:
        req = parse(PrefetchRequest, body)
    except InvalidRequest as exc:
        raise ApiError(exc.status, exc.message) from None
    asks = plan(
        list(pool.nodes),
        req.images,
        max_per_node=pool.cfg.max_per_node,
        affinity_slack=pool.cfg.affinity_slack,
        now=time.monotonic(),
    )
    for url, images in asks.items():
        node = pool.nodes.get(url)
        node.images = frozenset(node.images or ()) | frozenset(images)  # placement follows the pull
        pool._spawn(_send(pool, node, images))
    pool.metrics.inc("swe_pool_prefetch_images_total", float(sum(len(v) for v in asks.values())))
    return PrefetchAnswer(images=len(req.images), nodes=asks).model_dump()


async def _send(pool: Pool, node: Node, images: list[str]) -> None:
    try:
        resp = await pool._post(node, "/images/prefetch", {"images": images}, 30.0)
        ok = resp.status_code == 200
        if not ok:
            log.info("prefetch to %s answered %d: %s", node.url, resp.status_code, resp.text[:200])
    except ApiError as exc:
        ok = False
        log.info("prefetch to %s failed: %s", node.url, exc.message)
    pool.metrics.inc("swe_pool_prefetch_requests_total", outcome="ok" if ok else "error")
