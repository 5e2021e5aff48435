"""Fixtures for agent tests: the fixture task images, a real pool over a real exec server, a client.

Registered for every test by `tests/conftest.py` (`pytest_plugins`), used as parameters:
`fixture_instances` (instance_id -> TaskInstance, images built when missing),
`pool` (a pool server over one exec server), `client` (an EnvClient of that pool).
`leftover_containers(docker_client, pool)` lists the pool's containers still present.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from pool_fixtures import PoolProc

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.tasks import TaskInstance, load_instances
from tests.conftest import ROOT

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


@pytest.fixture
def pool(fleet, pool_factory, internal_network) -> PoolProc:
    return pool_factory(fleet(1, SWE_EXEC_NETWORKS=internal_network))


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
