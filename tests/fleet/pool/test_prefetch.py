"""Prefetch: where the pool asks nodes to pull (pure plan) and the whole path over a real registry."""

from __future__ import annotations

import time

from registry_fixtures import forget_image

from swe_rl.fleet.image_protocol import ImageCount, prefetch_body
from swe_rl.fleet.pool.nodes import Node
from swe_rl.fleet.pool.prefetch import plan


def node(url: str, images: set[str] | None = None, active: int = 0) -> Node:
    return Node(url, healthy=True, active=active, capacity=10, images=frozenset(images or ()))


def test_plan_spreads_leases_and_asks_only_nodes_without_the_image():
    a, b, c = node("a", {"img1"}), node("b"), node("c", active=9)
    asks = plan([a, b, c], [ImageCount(image="img1", count=1)], max_per_node=10, affinity_slack=0.25, now=0)
    assert asks == {}  # the lease goes to a, which has it
    asks = plan([a, b, c], [ImageCount(image="img2", count=2)], max_per_node=10, affinity_slack=0.25, now=0)
    assert len(asks) == 1  # both leases stay where the first pull goes (within the affinity slack)
    asks = plan([a, b, c], [ImageCount(image="img2", count=4)], max_per_node=10, affinity_slack=0.25, now=0)
    assert sorted(asks) == ["a", "b"]  # past the slack the fourth goes elsewhere; c is nearly full
    down = Node("d", healthy=False)
    assert "d" not in plan(
        [down, b], [ImageCount(image="x", count=3)], max_per_node=10, affinity_slack=0, now=0
    )
    assert plan([a], [ImageCount(image="x", count=0)], max_per_node=10, affinity_slack=0, now=0) == {}


def test_prefetch_body_names_or_counts():
    assert prefetch_body(["a", "b"]) == {"images": ["a", "b"]}
    assert prefetch_body({"a": 3}) == {"images": [{"image": "a", "count": 3}]}


def test_pool_prefetch_pulls_on_the_node_then_allocate_finds_it(
    fleet, pool_factory, registry_images, local_registry, docker_client
):
    ref = registry_images[1]
    forget_image(docker_client, ref)
    servers = fleet(1, SWE_EXEC_ALLOW_PULL="1", SWE_EXEC_IMAGE_PREFIXES=local_registry.host + "/")
    pool = pool_factory(servers)
    answer = pool.call("/prefetch", {"images": [{"image": ref, "count": 2}]})
    assert answer["nodes"] == {servers[0].url: [ref]} and answer["images"] == 1
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and ref not in {t for i in docker_client.images.list() for t in i.tags}:
        time.sleep(0.2)
    status = pool.wait_until(lambda s: s["nodes"][0]["image_disk"].get("prefetched") == 1, timeout=60)
    assert status["nodes"][0]["image_disk"]["pulls"] == 1
    lease = pool.call("/allocate", {"image": ref})
    assert lease["lease_id"]
    metrics = pool.get("/metrics").text
    assert "swe_pool_node_image_pulls" in metrics and "swe_pool_prefetch_images_total" in metrics
    for bad in ({}, {"images": [{"image": ref, "count": -1}]}, {"images": [{"name": ref}]}):
        resp = pool.post("/prefetch", bad)
        assert resp.status_code == 400 and "error" in resp.json(), bad
    pool.call("/close", {"lease_id": lease["lease_id"]})
