"""The pool never loses a lease on one answer: reconciliation, touch passes and routed calls raced on purpose.

A real `Pool` in this process drives a real exec server (its Flask app on waitress, a real ContainerManager
over real Docker) also in this process, so a test can force an interleaving at a hook point: an
allocation completing while a rejoining node's list is in flight, or the node's registry not knowing a
container for exactly one answer (what the exec-side races of issue 26 produced). No sleeps decide anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import docker.errors
import pytest
import waitress.server

from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.docker_backend import DockerBackend
from swe_rl.fleet.exec.manager import ContainerManager
from swe_rl.fleet.exec.validation import create_request
from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.pool.pool import Pool
from swe_rl.fleet.protocol import ApiError
from tests.conftest import TEST_ID_PREFIX, remove_containers_of


@dataclass
class ExecNode:
    url: str
    token: str
    manager: ContainerManager

    @contextlib.contextmanager
    def unknown(self, cid: str) -> Iterator[None]:
        """The node's registry does not know `cid` while the block runs (the container keeps running)."""
        reg = self.manager.registry
        with reg.lock:
            rec = reg.records.pop(cid)
        try:
            yield
        finally:
            with reg.lock:
                reg.records[cid] = rec


@pytest.fixture
def exec_node(docker_client, base_image, tmp_path) -> Iterator[ExecNode]:
    cfg = ExecConfig()
    cfg.server_id, cfg.state_dir = f"{TEST_ID_PREFIX}{secrets.token_hex(4)}", str(tmp_path / "state")
    cfg.token, cfg.max_warm = secrets.token_hex(16), 0
    manager = ContainerManager(cfg, DockerBackend(docker_client))
    server = waitress.server.create_server(create_app(manager), host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, name="exec-under-test", daemon=True)
    thread.start()
    try:
        yield ExecNode(f"http://127.0.0.1:{server.effective_port}", cfg.token, manager)
    finally:
        server.close()
        thread.join(30)
        manager.stop()
        remove_containers_of(cfg.server_id)


@pytest.fixture
async def pool(exec_node, tmp_path) -> AsyncIterator[Pool]:
    """A pool over the one node, reconciled and healthy; no background loops (the tests run the passes)."""
    cfg = PoolConfig(
        exec_urls=[exec_node.url],
        exec_token=exec_node.token,
        pool_token="pytest-client-token",
        pool_id=f"pytest-pool-{secrets.token_hex(4)}",
        db_path=str(tmp_path / "leases.db"),
        warm_min=0,
    ).finalize()
    pool = Pool(cfg)
    pool.calls.open()
    try:
        await pool.check_health()
        assert pool.nodes.get(exec_node.url).healthy
        yield pool
    finally:
        await pool.stop()  # releases every lease: their containers are destroyed


def container_exists(docker_client, cid: str) -> bool:
    try:
        docker_client.containers.get(cid)
    except docker.errors.NotFound:
        return False
    return True


async def test_a_create_completing_while_a_rejoining_node_is_reconciled_is_not_lost(
    pool, exec_node, docker_client, base_image, monkeypatch
):
    """Window (c): the node goes down with an allocation in flight to it; on rejoin its list is taken,
    then that create completes, then the pool compares: the new lease is neither lost nor an orphan."""
    node = pool.nodes.get(exec_node.url)
    real_post, real_get = pool.calls.route_post, pool.calls.http.get  # creates go over the lean client
    create_held, release_create = asyncio.Event(), asyncio.Event()

    async def post(node_: Any, path: str, payload: dict, timeout: float) -> Any:
        if path == "/container/create":
            create_held.set()
            await release_create.wait()
        return await real_post(node_, path, payload, timeout)

    monkeypatch.setattr(pool.calls, "route_post", post)
    allocation = asyncio.create_task(pool.allocate({"image": base_image}))
    await create_held.wait()
    pool.nodes.failed(node, "connection refused (forced by the test)", immediately=True)

    async def get(url: str, **kw: Any) -> Any:
        resp = await real_get(url, **kw)
        if url.endswith("/status"):  # the list is in: now the create goes through and the lease is made
            release_create.set()
            await allocation
        return resp

    monkeypatch.setattr(pool.calls.http, "get", get)
    await pool.check_health()

    lease = pool.leases[allocation.result()["lease_id"]]
    assert node.healthy and lease.lost is None
    assert container_exists(docker_client, lease.container_id)  # nor destroyed as an orphan
    assert (await pool.route("exec", {"lease_id": lease.lease_id, "command": "true"})).status_code == 200


async def test_one_missing_answer_to_a_touch_does_not_lose_the_lease(
    pool, exec_node, base_image, monkeypatch
):
    lease = pool.leases[(await pool.allocate({"image": base_image}))["lease_id"]]
    real_post = pool.calls.post
    answers: list[dict] = []

    async def post(node: Any, path: str, payload: dict, timeout: float) -> Any:
        if path == "/containers/touch" and not answers:  # the first touch meets a registry that lost track
            with exec_node.unknown(lease.container_id):
                resp = await real_post(node, path, payload, timeout)
        else:
            resp = await real_post(node, path, payload, timeout)
        answers.append(resp.json())
        return resp

    monkeypatch.setattr(pool.calls, "post", post)
    await pool.touch_live()

    assert lease.lost is None
    assert [a["missing"] for a in answers] == [[lease.container_id], []]  # forced answer, then the re-check


async def test_one_unknown_answer_to_a_routed_call_does_not_lose_the_lease(
    pool, exec_node, base_image, monkeypatch
):
    lease = pool.leases[(await pool.allocate({"image": base_image}))["lease_id"]]
    real_post = pool.calls.route_post
    statuses: list[int] = []

    async def post(node: Any, path: str, payload: dict, timeout: float) -> Any:
        if path == "/container/exec" and not statuses:
            with exec_node.unknown(lease.container_id):
                resp = await real_post(node, path, payload, timeout)
        else:
            resp = await real_post(node, path, payload, timeout)
        statuses.append(resp.status_code)
        return resp

    monkeypatch.setattr(pool.calls, "route_post", post)
    resp = await pool.route("exec", {"lease_id": lease.lease_id, "command": "echo hi"})

    assert lease.lost is None
    assert statuses == [404, 200] and resp.status_code == 200


async def test_one_list_without_the_container_does_not_lose_the_lease_on_rejoin(
    pool, exec_node, base_image, monkeypatch
):
    lease = pool.leases[(await pool.allocate({"image": base_image}))["lease_id"]]
    node = pool.nodes.get(exec_node.url)
    real_get = pool.calls.http.get

    async def get(url: str, **kw: Any) -> Any:
        if url.endswith("/status"):
            with exec_node.unknown(lease.container_id):
                return await real_get(url, **kw)
        return await real_get(url, **kw)

    monkeypatch.setattr(pool.calls.http, "get", get)
    pool.nodes.failed(node, "connection refused (forced by the test)", immediately=True)
    await pool.check_health()

    assert node.healthy and lease.lost is None


async def test_a_container_really_gone_is_lost_by_a_touch_pass(pool, exec_node, docker_client, base_image):
    """The re-checks keep the pool honest: a container removed behind its back is still reported lost."""
    lease = pool.leases[(await pool.allocate({"image": base_image}))["lease_id"]]
    docker_client.containers.get(lease.container_id).remove(force=True)
    exec_node.manager.reap_once()  # the node forgets what Docker no longer has

    await pool.touch_live()
    assert lease.lost and "no longer exists" in lease.lost
    with pytest.raises(ApiError) as err:  # its tombstone answers 410
        await pool.route("exec", {"lease_id": lease.lease_id, "command": "true"})
    assert err.value.status == 410


async def test_a_routed_call_on_a_forgotten_container_is_lost_after_two_answers(
    pool, exec_node, docker_client, base_image
):
    lease = pool.leases[(await pool.allocate({"image": base_image}))["lease_id"]]
    docker_client.containers.get(lease.container_id).remove(force=True)
    exec_node.manager.reap_once()

    with pytest.raises(ApiError) as err:
        await pool.route("exec", {"lease_id": lease.lease_id, "command": "true"})
    assert err.value.status == 410 and lease.lost


async def test_a_rejoin_loses_what_is_really_gone_and_destroys_orphans(
    pool, exec_node, docker_client, base_image
):
    gone = pool.leases[(await pool.allocate({"image": base_image}))["lease_id"]]
    docker_client.containers.get(gone.container_id).remove(force=True)
    exec_node.manager.reap_once()
    body = {"image": base_image, "owner": pool.cfg.pool_id, "lease_id": "ghost"}
    orphan = exec_node.manager.create(create_request(body, exec_node.manager.config))
    node = pool.nodes.get(exec_node.url)
    pool.nodes.failed(node, "connection refused (forced by the test)", immediately=True)
    await pool.check_health()

    assert node.healthy and gone.lost
    assert not container_exists(docker_client, orphan["container_id"])
