"""Fixtures for agent tests: the fixture task images, a real pool over a real exec server, a client.

Registered for every test by `tests/conftest.py` (`pytest_plugins`), used as parameters:
`fixture_instances` (instance_id -> TaskInstance, images built when missing),
`pool` (a pool server over one exec server, shared by the tests of one process: `SharedPool`),
`client` (an EnvClient of that pool).
`leftover_containers(docker_client, pool)` lists the pool's containers still present.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pool_fixtures import FLEET_TOKEN, PoolProc, new_pool, stop_pool

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.tasks import TaskInstance, load_instances
from tests.conftest import ROOT, ExecServerProc, start_exec_server, stop_exec_servers

FIXTURES_JSONL = ROOT / "data" / "fixtures" / "instances.jsonl"
DOCUMENTED_NETWORK = "swe-rl-internal"
"""The network fixture rows name (docs/grading.md)."""


@pytest.fixture(scope="session")
def fixture_instances(docker_client, base_image, internal_network) -> dict[str, TaskInstance]:
    """The bundled fixture instances; their images are built offline when missing. A row naming the
    documented network ``swe-rl-internal`` gets this session's internal network instead (the `pool`
    fixture's exec server allows it), as a node set up per docs/grading.md would have it."""
    loaded = load_instances(FIXTURES_JSONL)
    assert loaded.ok, loaded.errors
    missing = []
    for inst in loaded.instances:
        try:
            docker_client.images.get(inst.image)
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
            missing.append(inst.instance_id)
    if missing:
        subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh"), *missing], check=True)
    return {inst.instance_id: _on_session_network(inst, internal_network) for inst in loaded.instances}


def _on_session_network(inst: TaskInstance, network: str) -> TaskInstance:
    if inst.extra.get("network") != DOCUMENTED_NETWORK:
        return inst
    return inst.model_copy(update={"extra": {**inst.extra, "network": network}})


class SharedPool:
    """One pool over one exec server per test process, handed to every test that asks for `pool`.

    Why: 150 tests ask for it, and two Python servers started and stopped per test cost each of them
    2-3 s of CPU (imports) and 4-9 s on a loaded 2-core machine: minutes of CI. A test gets them only
    as a previous test left them: both processes alive and no container of the pool left (the tests
    assert it); anything else (a server died, a container stayed) stops both, and the next test starts
    a fresh pair. Tests that kill, restart or reconfigure a pool start their own (`pool_factory`)."""

    def __init__(self, directory: Path, network: str) -> None:
        self.directory = directory
        self.network = network
        self.servers: list[ExecServerProc] = []
        self.pool: PoolProc | None = None

    def ready(self) -> PoolProc:
        if self.pool is None or not self._alive():
            self.stop()
            start_exec_server(self.directory, self.servers, token=FLEET_TOKEN, SWE_EXEC_NETWORKS=self.network)
            self.pool = new_pool(self.servers, self.directory)
            self.pool.start()
        return self.pool

    def after_test(self, docker_client: Any) -> None:
        """Keep the pair for the next test only when this one left it as it found it."""
        if self.pool is not None and (not self._alive() or leftover_containers(docker_client, self.pool)):
            self.stop()

    def _alive(self) -> bool:
        assert self.pool is not None and self.pool.proc is not None
        return self.pool.proc.poll() is None and all(s.proc.poll() is None for s in self.servers)

    def stop(self) -> None:
        if self.pool is not None:
            stop_pool(self.pool)
            self.pool = None
        stop_exec_servers(self.servers)
        self.servers.clear()


@pytest.fixture(scope="session")
def shared_pool(docker_client, base_image, internal_network, tmp_path_factory) -> Iterator[SharedPool]:
    shared = SharedPool(tmp_path_factory.mktemp("shared-pool"), internal_network)
    yield shared
    shared.stop()


@pytest.fixture
def pool(shared_pool, docker_client) -> Iterator[PoolProc]:
    """A pool over one exec server on the session's internal network (shared: `SharedPool`)."""
    yield shared_pool.ready()
    shared_pool.after_test(docker_client)


def client_for(pool: PoolProc, **overrides: Any) -> EnvClient:
    return EnvClient(EnvClientConfig(pool_url=pool.url, token=pool.token, backoff=0.1, **overrides))


@pytest.fixture
async def client(pool):
    async with client_for(pool, allocate_deadline=20) as c:
        yield c


def leftover_containers(docker_client: Any, pool: PoolProc, wait: float = 20.0) -> list[Any]:
    """Containers of this pool that still exist after ``wait`` seconds (after an episode: none should).
    The pool releases a lease at once and destroys its container right after, in the background."""
    deadline = time.monotonic() + wait
    while True:
        left = docker_client.containers.list(
            all=True, filters={"label": f"swe-rl.owner={pool.pool_id}"}, ignore_removed=True
        )
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
