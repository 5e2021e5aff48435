"""Create, claim, touch and the reaper interleaved on purpose: a container being created or recorded is
never "unknown" to the reaper nor "missing" to touch.

Each test forces one interleaving with the real classes over real Docker, by running the other party at a
hook point (inside the reaper's container listing, right after a container started), never by sleeping.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker.models.containers
import pytest

from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.containers import Containers
from swe_rl.fleet.exec.docker_backend import DockerBackend
from swe_rl.fleet.exec.manager import ContainerManager
from swe_rl.fleet.exec.validation import create_request, warm_request
from tests.conftest import TEST_ID_PREFIX, remove_containers_of


@pytest.fixture
def manager(docker_client, base_image, tmp_path) -> Iterator[ContainerManager]:
    """An exec server's ContainerManager in this process (no background threads: the test drives them)."""
    cfg = ExecConfig()
    cfg.server_id, cfg.state_dir = f"{TEST_ID_PREFIX}{secrets.token_hex(4)}", str(tmp_path / "state")
    cfg.warm_min_free_memory = "0"  # warm starts whatever the machine's free memory
    mgr = ContainerManager(cfg, DockerBackend(docker_client))
    try:
        yield mgr
    finally:
        mgr.stop()
        remove_containers_of(cfg.server_id)


def create(mgr: ContainerManager, image: str, lease: str = "lease-1") -> dict[str, Any]:
    return mgr.create(create_request({"image": image, "lease_id": lease, "owner": "pytest"}, mgr.config))


def exists(docker_client, cid: str) -> bool:
    try:
        docker_client.containers.get(cid)
    except docker.errors.NotFound:
        return False
    return True


def warm_ready(mgr: ContainerManager, count: int = 1) -> None:
    """Wait (bounded, not timed) until `count` warm containers are recorded and ready."""
    deadline = time.monotonic() + 120
    while mgr.warm_pool.counts()["warm_total"] < count:
        assert time.monotonic() < deadline, "the warm start never recorded its container"
        time.sleep(0.05)


def during_reaper_listing(monkeypatch, action: Callable[[], None]) -> None:
    """Run `action` once, right after the reaper's container listing returned (before it takes the lock).

    Hooked at the node backend seam (`DockerBackend.list_containers`, what the reaper lists through),
    not inside docker-py: the image store lists containers too, through docker-py's own calls."""
    real_list = DockerBackend.list_containers
    done = threading.Event()

    def list_then_act(self: Any, *args: Any, **kwargs: Any) -> Any:
        listed = real_list(self, *args, **kwargs)
        if not done.is_set():
            done.set()
            action()
        return listed

    monkeypatch.setattr(DockerBackend, "list_containers", list_then_act)


def test_a_create_recorded_while_the_reaper_lists_is_not_forgotten(
    manager, docker_client, base_image, monkeypatch
):
    """Window (a): the reaper's list misses a container recorded after it; it must not forget the record."""
    made: dict[str, Any] = {}
    during_reaper_listing(monkeypatch, lambda: made.update(create(manager, base_image)))

    assert manager.reap_once() == []
    cid = made["container_id"]
    assert manager.touch([cid]) == ([cid], [])  # not "missing": the pool would mark the lease lost
    assert manager.reap_once() == []  # nor "unknown" on the next pass
    assert exists(docker_client, cid)


def reap_after_each_start(manager: Any, monkeypatch: Any) -> list[list[str]]:
    """Window (b)'s interleaving: a reaper pass right after each container start, before the create
    records it; returns what each pass removed."""
    real_start = Containers.start_container
    reaped: list[list[str]] = []

    def start_then_reap(self: Containers, *args: Any, **kwargs: Any) -> Any:
        container = real_start(self, *args, **kwargs)
        reaped.append(manager.reap_once())
        return container

    monkeypatch.setattr(Containers, "start_container", start_then_reap)
    return reaped


def test_a_container_started_but_not_yet_recorded_is_not_unknown(
    manager, docker_client, base_image, monkeypatch
):
    """Window (b): a reaper pass between `start_container` and the record of the create."""
    reaped = reap_after_each_start(manager, monkeypatch)
    cid = create(manager, base_image)["container_id"]

    assert reaped == [[]]  # the pass ran inside the window and removed nothing
    assert exists(docker_client, cid)
    assert manager.touch([cid]) == ([cid], [])
    assert manager.reap_once() == []


def test_a_warm_container_started_but_not_yet_recorded_is_not_unknown(
    manager, docker_client, base_image, monkeypatch
):
    """Window (b) on the warm path: a reaper pass between a warm start and its record, then a claim."""
    reaped = reap_after_each_start(manager, monkeypatch)
    body = {"image": base_image, "count": 1}
    manager.warm(warm_request(body, manager.config))
    assert manager.warm_pool.refill_once() == 1
    warm_ready(manager)

    assert reaped == [[]]
    claimed = create(manager, base_image)
    assert claimed["warm"] is True and exists(docker_client, claimed["container_id"])
    assert manager.touch([claimed["container_id"]]) == ([claimed["container_id"]], [])


def test_a_warm_claim_while_the_reaper_lists_keeps_the_lease(manager, docker_client, base_image, monkeypatch):
    """A warm container claimed for a lease between the reaper's listing and its verdict stays leased."""
    manager.warm(warm_request({"image": base_image, "count": 1}, manager.config))
    assert manager.warm_pool.refill_once() == 1
    warm_ready(manager)
    made: dict[str, Any] = {}
    during_reaper_listing(monkeypatch, lambda: made.update(create(manager, base_image)))

    assert manager.reap_once() == []
    assert made["warm"] is True
    assert manager.touch([made["container_id"]]) == ([made["container_id"]], [])
    assert exists(docker_client, made["container_id"])


def test_a_container_removed_behind_the_servers_back_is_still_forgotten(manager, docker_client, base_image):
    """The fix keeps the reaper's job: a recorded container that Docker no longer lists is forgotten."""
    cid = create(manager, base_image)["container_id"]
    docker_client.containers.get(cid).remove(force=True)

    assert manager.touch([cid]) == ([cid], [])  # not known yet
    manager.reap_once()
    assert manager.touch([cid]) == ([], [cid])


def test_an_unknown_container_of_this_server_is_reaped(manager, docker_client, base_image):
    """What no create is making and no record knows (left by a crash) is removed."""
    from swe_rl.fleet.exec.containers import CreateSpec

    spec = CreateSpec(base_image, "1g", 1.0, 256, False, "/testbed", ())
    stray = manager.containers.start_container(spec, {}, 0.0)
    with manager.registry.lock:
        manager.registry.creating.discard(stray.name)  # as if its create had died half-way

    assert manager.reap_once() == [stray.id]
    assert not exists(docker_client, stray.id)
