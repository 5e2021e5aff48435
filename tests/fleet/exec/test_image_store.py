"""Images on a node against a real registry on loopback: pull on demand once, clear errors, the disk
budget (LRU eviction, in-use and pinned images kept), prefetch."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
from registry_fixtures import forget_image

from swe_rl.fleet.exec.image_disk import LocalImage, bytes_used, layers_of, parse_budget, victims
from tests.conftest import free_port


def healthz_images(srv) -> dict:
    return srv.get("/healthz").json()["images"]


def local_tags(docker_client) -> set[str]:
    return {t for i in docker_client.images.list() for t in i.tags}


def managed(docker_client, srv) -> list:
    return docker_client.containers.list(all=True, filters={"label": f"swe-rl.exec-server={srv.server_id}"})


def create(srv, image: str, **kw):
    return srv.post("/container/create", {"image": image, **kw}, timeout=300)


def wait_for(predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


# ---- pure arithmetic


def test_shared_layers_count_once_and_lru_victims():
    base = (("b", 100),)
    a = LocalImage("a", ("r/a:1",), (*base, ("la", 10)))
    b = LocalImage("b", ("r/b:1",), (*base, ("lb", 10)))
    c = LocalImage("c", ("r/c:1",), (*base, ("lc", 10)))
    assert bytes_used([a, b, c]) == 130
    used = {"a": 3.0, "b": 1.0, "c": 2.0}
    assert [i.id for i in victims([a, b, c], 120, keep=set(), last_used=used)] == ["b"]
    assert [i.id for i in victims([a, b, c], 120, keep={"b"}, last_used=used)] == ["c"]
    assert victims([a, b, c], 200, keep=set(), last_used=used) == []
    # the shared base never frees until the last image holding it goes
    assert [i.id for i in victims([a, b, c], 50, keep={"a"}, last_used=used)] == ["b", "c"]


def test_history_chain_names_layers_and_budget_parses():
    hist = [
        {"Created": 2, "CreatedBy": "COPY x", "Size": 5},
        {"Created": 1, "CreatedBy": "ADD root", "Size": 7},
    ]
    other = [{"Created": 3, "CreatedBy": "COPY y", "Size": 4}, hist[1]]
    assert layers_of(hist)[0] == layers_of(other)[0]  # same base layer, same key
    assert layers_of(hist)[1][0] != layers_of(other)[1][0]
    assert parse_budget("", 1000) == 0
    assert parse_budget("50%", 1000) == 500
    assert parse_budget("2k", 0) == 2048
    with pytest.raises(ValueError):
        parse_budget("150%", 1000)


# ---- a real exec server, a real registry


@pytest.fixture
def node(exec_server_factory, local_registry):
    def start(**env: str):
        return exec_server_factory(
            SWE_EXEC_ALLOW_PULL="1", SWE_EXEC_IMAGE_PREFIXES=local_registry.host + "/", **env
        )

    return start


def test_concurrent_creates_of_a_missing_image_pull_once(node, registry_images, docker_client):
    ref = registry_images[0]
    forget_image(docker_client, ref)
    srv = node()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: create(srv, ref), range(4)))
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    stats = healthz_images(srv)
    assert stats["pulls"] == 1 and stats["pulls_failed"] == 0
    assert stats["bytes_used"] > 0
    assert ref in local_tags(docker_client)


def test_unknown_image_and_registry_down_are_clear_and_create_nothing(node, local_registry, docker_client):
    srv = node()
    unknown = create(srv, local_registry.ref("swe-rl-test/never-pushed:1"))
    assert unknown.status_code == 404 and "not found" in unknown.json()["error"]
    down = create(srv, f"127.0.0.1:{free_port()}/swe-rl-test/x:1")
    assert down.status_code == 502 and down.json().get("registry_down") is True
    assert managed(docker_client, srv) == []
    assert healthz_images(srv)["pulls_failed"] == 2


def test_pulls_off_is_a_404(exec_server_factory, registry_images, docker_client):
    forget_image(docker_client, registry_images[1])
    srv = exec_server_factory()
    r = create(srv, registry_images[1])
    assert r.status_code == 404 and healthz_images(srv)["pulls"] == 0


def test_budget_evicts_lru_but_never_in_use_or_pinned(node, registry_images, docker_client, base_image):
    a, b, c, d = registry_images
    for ref in registry_images:
        forget_image(docker_client, ref)
    base = docker_client.images.get(base_image).attrs["Size"]
    # the base once plus room for about two small layers (2 MiB each)
    srv = node(SWE_EXEC_IMAGE_DISK_BUDGET=str(base + (5 << 20)), SWE_EXEC_PINNED_IMAGES=d)
    held = create(srv, a)  # a stays in use: its container lives through the test
    assert held.status_code == 200, held.text
    for ref in (b, c):
        r = create(srv, ref)
        assert r.status_code == 200, r.text
        assert srv.post("/container/destroy", {"container_id": r.json()["container_id"]}).status_code == 200
    tags = local_tags(docker_client)
    assert a in tags and c in tags and b not in tags  # b was the least recently used image nobody used
    stats = healthz_images(srv)
    assert stats["evictions"] >= 1 and stats["bytes_used"] <= stats["budget"]
    r = create(srv, d)  # pinned: pulled, and c (idle) evicted to make it fit
    assert r.status_code == 200
    assert srv.post("/container/destroy", {"container_id": r.json()["container_id"]}).status_code == 200
    assert c not in local_tags(docker_client)
    # a hard limit: a in use, d pinned, nothing idle can go: b is refused and does not stay on disk
    r = create(srv, b)
    assert r.status_code == 507 and r.json().get("disk_full") is True, r.text
    assert b not in local_tags(docker_client)
    stats = healthz_images(srv)
    assert stats["bytes_used"] <= stats["budget"]
    # once a is idle it is the one evicted, and b fits
    assert srv.post("/container/destroy", {"container_id": held.json()["container_id"]}).status_code == 200
    r = create(srv, b)
    assert r.status_code == 200, r.text
    tags = local_tags(docker_client)
    assert d in tags and b in tags and a not in tags and c not in tags
    stats = healthz_images(srv)
    assert stats["bytes_used"] <= stats["budget"]


def test_a_prefetched_image_is_kept_until_its_lease_comes(node, registry_images, docker_client, base_image):
    """Creates pulling other images under a full budget evict the idle ones, never the prefetched image
    no create asked for yet (it was pulled again before: 17 pulls for 12 allocates)."""
    p, x, y, z = registry_images
    for ref in registry_images:
        forget_image(docker_client, ref)
    base = docker_client.images.get(base_image).attrs["Size"]
    srv = node(SWE_EXEC_IMAGE_DISK_BUDGET=str(base + (5 << 20)))  # room for about two small layers
    assert srv.post("/images/prefetch", {"images": [p]}).json()["images"][p] == "pulling"
    wait_for(lambda: p in local_tags(docker_client) and healthz_images(srv)["pulling"] == [])
    for ref in (x, y, z):  # each needs room: the last one's image goes, never p
        r = create(srv, ref)
        assert r.status_code == 200, r.text
        assert srv.post("/container/destroy", {"container_id": r.json()["container_id"]}).status_code == 200
        assert p in local_tags(docker_client)
    r = create(srv, p)  # its lease: found on the node
    assert r.status_code == 200, r.text
    stats = healthz_images(srv)
    assert stats["pulls"] == 4 and stats["evictions"] >= 2, stats
    assert stats["bytes_used"] <= stats["budget"]


def test_disk_full_is_507_and_creates_nothing(node, registry_images, docker_client, base_image):
    ref = registry_images[2]
    forget_image(docker_client, ref)
    for other in registry_images:  # pinned images already on the node take the whole budget
        if other != ref and other not in local_tags(docker_client):
            docker_client.images.pull(other)
    srv = node(SWE_EXEC_IMAGE_DISK_BUDGET="1m", SWE_EXEC_PINNED_IMAGES=",".join(registry_images))
    r = create(srv, ref)
    assert r.status_code == 507 and r.json().get("disk_full") is True, r.text
    assert managed(docker_client, srv) == []
    assert ref not in local_tags(docker_client)  # a pull past the budget is not kept either
    # and a prefetch past it is refused (skipped, or pulled then removed again): the image is not kept
    assert srv.post("/images/prefetch", {"images": [ref]}).status_code == 200
    wait_for(lambda: healthz_images(srv)["pulling"] == [])
    assert ref not in local_tags(docker_client)


def test_prefetch_pulls_ahead_and_bad_bodies_are_400(node, registry_images, docker_client):
    ref = registry_images[3]
    forget_image(docker_client, ref)
    srv = node()
    r = srv.post("/images/prefetch", {"images": [ref]})
    assert r.status_code == 200 and r.json()["images"][ref] in ("pulling", "present")
    wait_for(lambda: ref in local_tags(docker_client))
    wait_for(lambda: healthz_images(srv)["pulling"] == [])
    assert healthz_images(srv)["prefetched"] == 1
    assert create(srv, ref).status_code == 200
    assert healthz_images(srv)["pulls"] == 1  # the create found it there
    for bad in ({}, {"images": "x"}, {"images": [""]}, {"images": ["a b"]}, {"images": [ref], "extra": 1}):
        resp = srv.post("/images/prefetch", bad)
        assert resp.status_code == 400 and "error" in resp.json(), bad
