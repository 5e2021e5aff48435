"""Placement and warm planning as pure functions: node states in, decision out (no HTTP, no Docker)."""

from __future__ import annotations

import itertools

from swe_rl.fleet.pool import placement
from swe_rl.fleet.pool.nodes import Node
from swe_rl.fleet.pool.placement import (
    Demand,
    cap,
    current_targets,
    load,
    next_demand,
    pick_node,
    spread,
    warm_key,
)

IMAGE = "swe-rl/task:one"
KEY = warm_key(IMAGE, {})
NOW = 1000.0


def node(
    url: str,
    *,
    active: int = 0,
    pending: int = 0,
    capacity: int = 0,
    healthy: bool = True,
    images: frozenset[str] | None = None,
    warm: dict[str, int] | None = None,
    memory_available: int = 0,
    max_warm: int = 0,
) -> Node:
    return Node(
        url,
        healthy=healthy,
        active=active,
        pending=pending,
        capacity=capacity,
        images=images,
        warm=warm or {},
        memory_available=memory_available,
        max_warm=max_warm,
    )


def pick(nodes: list[Node], *, slack: float = 0.1, max_per_node: int = 10, prefer: str = "") -> str:
    counter = itertools.count()
    return pick_node(
        nodes,
        KEY,
        max_per_node=max_per_node,
        affinity_slack=slack,
        now=NOW,
        rng=lambda: next(counter) * 1e-6,
        prefer=prefer,
    ).url


def test_warm_key_ignores_identity_fields_and_option_order():
    a = warm_key(IMAGE, {"memory": "2g", "network": False, "lease_id": "x", "owner": "p", "idle_ttl": 5})
    b = warm_key(IMAGE, {"network": False, "memory": "2g"})
    assert a == b
    assert warm_key(IMAGE, {"memory": "4g"}) != b
    assert warm_key(IMAGE, {"memory": None}) == warm_key(IMAGE, {})


def test_load_counts_pending_and_cap_takes_the_smaller():
    n = node("a", active=3, pending=2, capacity=4)
    assert load(n) == 5
    assert cap(n, 10) == 4
    assert cap(node("b"), 10) == 10  # capacity unknown: ours
    assert cap(node("c", capacity=20), 10) == 10


def test_least_loaded_node_wins():
    assert pick([node("a", active=5), node("b", active=1), node("c", active=3)]) == "b"


def test_node_cap_is_relative_load():
    # 2 of 4 (half full) loses to 3 of 10
    assert pick([node("small", active=2, capacity=4), node("big", active=3)]) == "big"


def test_warm_node_preferred_within_the_slack():
    warm = node("warm", active=1, warm={IMAGE: 1})
    cold = node("cold", active=0)
    assert pick([cold, warm], slack=0.2) == "warm"  # 10% more loaded, inside 20% slack
    assert pick([cold, warm], slack=0.05) == "cold"  # outside the slack load decides
    assert pick([node("cold", active=1), node("warm", active=1, warm={IMAGE: 2})], slack=0) == "warm"  # tie


def test_warm_target_counts_until_it_expires():
    target = node("t", active=1)
    target.warm_targets[KEY] = (2, NOW + 10)
    assert placement.warm_at(target, KEY, NOW)
    assert pick([node("cold", active=1), target], slack=0) == "t"
    target.warm_targets[KEY] = (2, NOW - 1)
    assert not placement.warm_at(target, KEY, NOW)


def test_image_affinity_after_warm():
    without = node("without", images=frozenset({"other"}))
    with_image = node("with", images=frozenset({IMAGE}))
    unknown = node("unknown", images=None)  # unknown image list counts as having it
    assert pick([without, with_image]) == "with"
    assert pick([without, unknown]) == "unknown"


def test_a_restore_prefers_the_node_holding_its_snapshot_after_warm():
    """No tarball to carry through the pool; a warm container (no create) and the load still come first."""
    holder, other = node("holder", images=frozenset({"other"})), node("other", memory_available=9)
    assert pick([other, holder]) == "other"
    assert pick([other, holder], prefer="holder") == "holder"  # before image and memory
    assert pick([node("warm", warm={IMAGE: 1}), holder], prefer="holder") == "warm"
    assert pick([node("idle"), node("holder", active=5)], prefer="holder") == "idle"


def test_memory_headroom_breaks_ties():
    assert pick([node("a", memory_available=1), node("b", memory_available=9)]) == "b"


def test_next_demand():
    assert next_demand(0, None, 1, override=False) == 1  # warm_min when no hint
    assert next_demand(5, None, 1, override=False) == 4  # an allocate consumes one expected lease
    assert next_demand(2, 8, 1, override=False) == 8  # a larger hint raises it
    assert next_demand(5, 0, 1, override=True) == 0  # POST /warm sets it (0 cancels)
    assert next_demand(0, None, 0, override=False) == 0  # implicit warming off


def test_demand_record():
    d = Demand(3, NOW + 60)
    assert d.remaining == 3 and d.expires == NOW + 60


def test_current_targets_drop_expired():
    a, b = node("a"), node("b")
    a.warm_targets[KEY] = (3, NOW + 5)
    b.warm_targets[KEY] = (2, NOW - 5)
    assert current_targets([a, b, node("c")], KEY, NOW) == {"a": 3, "b": 0, "c": 0}


def test_spread_fills_by_room_and_respects_caps():
    nodes = [node("a", active=8), node("b", active=2), node("c", active=5)]
    new = spread(nodes, {}, 6, max_per_node=10, warm_per_image=8, rng=lambda: 0.0)
    assert sum(new.values()) == 6
    assert new["a"] <= 2  # never past the cap: 10 - 8
    assert new["b"] >= new["c"] >= new["a"]


def test_spread_stops_when_the_fleet_is_full_and_skips_down_nodes():
    nodes = [node("a", active=9), node("down", healthy=False), node("b", active=10)]
    new = spread(nodes, {"down": 2}, 5, max_per_node=10, warm_per_image=8)
    assert new == {"a": 1, "down": 0, "b": 0}


def test_spread_honours_the_node_warm_limit():
    new = spread([node("a", max_warm=2), node("b", max_warm=0)], {}, 6, max_per_node=10, warm_per_image=3)
    assert new == {"a": 2, "b": 3}


def test_spread_shrinks_from_the_largest_target():
    nodes = [node("a"), node("b")]
    new = spread(nodes, {"a": 4, "b": 1}, 2, max_per_node=10, warm_per_image=8)
    assert new == {"a": 1, "b": 1}
    assert spread(nodes, {"a": 4, "b": 1}, 0, max_per_node=10, warm_per_image=8) == {"a": 0, "b": 0}


def test_spread_keeps_what_is_already_right():
    nodes = [node("a"), node("b")]
    assert spread(nodes, {"a": 1, "b": 1}, 2, max_per_node=10, warm_per_image=8) == {"a": 1, "b": 1}
