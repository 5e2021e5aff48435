"""EnvClient against a real pool server over a real exec server."""

from __future__ import annotations

import asyncio
import time

import pytest
from pool_fixtures import PoolProc

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.errors import (
    BadRequest,
    FileNotFound,
    FleetError,
    FleetFull,
    FleetUnavailable,
    ImageNotFound,
    LeaseLost,
)
from tests.conftest import free_port


async def none_left(docker_client, filters: dict, timeout: float = 30) -> list:
    """Containers matching filters once the pool's background destroys are done (close does not wait for them)."""
    deadline = time.monotonic() + timeout
    while (
        left := docker_client.containers.list(all=True, filters=filters, ignore_removed=True)
    ) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return left


def client_for(pool: PoolProc, **overrides: object) -> EnvClient:
    return EnvClient(EnvClientConfig(pool_url=pool.url, token=pool.token, backoff=0.1, **overrides))


@pytest.fixture
def pool(fleet, pool_factory) -> PoolProc:
    return pool_factory(fleet(1))


async def test_lease_roundtrip(pool, docker_client, base_image):
    async with client_for(pool, heartbeat_interval=0.3) as client:
        async with client.lease(base_image, instance_id="demo-1", workdir="/testbed") as env:
            assert env.instance_id == "demo-1" and env.workdir == "/testbed"
            setup = await env.exec(
                "git init -q && printf 'a\\n' > f.txt && git add f.txt && git commit -qm init"
            )
            assert setup.ok and setup.output == ""
            result = await env.exec("echo $GREETING; pwd; exit 3", env={"GREETING": "hi"}, workdir="/tmp")
            assert (result.returncode, result.output, result.ok) == (3, "hi\n/tmp\n", False)
            slow = await env.exec("sleep 20", timeout=1)
            assert slow.timed_out and slow.duration < 10

            await env.write_file("f.txt", "b\n")
            await env.write_file("/tmp/blob", b"\x00\xff\x01", mode=0o600)
            assert await env.read_file("/testbed/f.txt") == b"b\n"
            assert await env.read_file("/tmp/blob") == b"\x00\xff\x01"
            patch = await env.diff()
            assert "-a\n+b\n" in patch

            await env.exec("git reset -q --hard")
            graded = await env.evaluate(patch, "grep -qx b f.txt && echo PASSED", timeout=60)
            assert graded.apply_status == "applied" and graded.returncode == 0 and "PASSED" in graded.test_log
            broken = await env.evaluate("not a patch\n", "echo never", timeout=60)
            assert broken.apply_status == "failed" and broken.returncode is None

            first_expiry = env.expires_at
            await asyncio.sleep(1.0)  # the background heartbeat extends the lease
            assert env.expires_at > first_expiry
            container_id = env.container_id
        assert env.closed
        assert (await client.status())["totals"]["leases"] == 0
    assert not await none_left(docker_client, {"id": container_id})


async def test_lease_closed_on_exception_and_cancellation(pool, docker_client, base_image):
    async with client_for(pool) as client:
        with pytest.raises(RuntimeError, match="agent crashed"):
            async with client.lease(base_image) as env:
                await env.exec("true")
                raise RuntimeError("agent crashed")
        assert env.closed and (await client.status())["totals"]["leases"] == 0

        entered = asyncio.Event()

        async def rollout() -> None:
            async with client.lease(base_image) as env:
                entered.set()
                await env.exec("sleep 30", timeout=60)

        task = asyncio.create_task(rollout())
        await asyncio.wait_for(entered.wait(), 60)
        await asyncio.sleep(0.5)  # the exec is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await client.status())["totals"]["leases"] == 0  # closed before the task finished

        # cancelled while allocating: the client releases the lease by its request id
        allocating = asyncio.create_task(client.allocate(base_image))
        await asyncio.sleep(0.05)
        allocating.cancel()
        with pytest.raises(asyncio.CancelledError):
            await allocating
    status = pool.status()
    assert status["totals"]["leases"] == 0
    assert not await none_left(docker_client, {"label": f"swe-rl.owner={pool.pool_id}"})


async def test_full_fleet_retries_until_deadline(fleet, pool_factory, base_image):
    pool = pool_factory(fleet(1), SWE_POOL_MAX_PER_NODE="1", SWE_POOL_RETRY_AFTER="1")
    async with client_for(pool, allocate_deadline=3.5) as client:
        held = await client.allocate(base_image)
        t0 = time.monotonic()
        with pytest.raises(FleetFull, match="full") as info:
            await client.allocate(base_image)
        elapsed = time.monotonic() - t0
        assert 3.0 <= elapsed < 30 and isinstance(info.value, FleetUnavailable)  # gave up, near its deadline
        full = [
            line
            for line in pool.get("/metrics").text.splitlines()
            if line.startswith('swe_pool_allocations_total{outcome="full"}')
        ]
        assert float(full[0].split()[-1]) >= 3  # honoured Retry-After: 1 s, not a hot loop nor one try

        client.config.allocate_deadline = 30
        waiting = asyncio.create_task(client.allocate(base_image))
        await asyncio.sleep(1.5)
        assert not waiting.done()
        await held.close()  # room again: the waiting allocation gets it
        lease = await asyncio.wait_for(waiting, 10)
        await lease.close()


async def test_typed_errors(pool, base_image):
    async with client_for(pool) as client:
        with pytest.raises(ImageNotFound, match="image not found"):
            await client.allocate("swe-rl/no-such-image:1")
        missing = [
            line
            for line in pool.get("/metrics").text.splitlines()
            if line.startswith('swe_pool_allocations_total{outcome="image_not_found"}')
        ]
        assert float(missing[0].split()[-1]) == 1  # asked once: not retried
        with pytest.raises(BadRequest, match="memory"):
            await client.allocate(base_image, memory="lots")

        a = await client.allocate(base_image, request_id="same")
        b = await client.allocate(base_image, request_id="same")
        assert a.lease_id == b.lease_id
        with pytest.raises(FileNotFound, match="no such file"):
            await a.read_file("/no/such/file")
        with pytest.raises(BadRequest, match="command"):
            await a.exec("")
        await b.close()  # closed through another handle: a is gone for good
        with pytest.raises(LeaseLost):
            await a.exec("true")
        with pytest.raises(LeaseLost):
            await a.read_file("/etc/hostname")
        with pytest.raises(LeaseLost):
            await a.heartbeat()
        await a.close()  # idempotent

    async with EnvClient(EnvClientConfig(pool_url=pool.url, token="wrong")) as client:
        with pytest.raises(BadRequest, match="unauthorized"):
            await client.allocate(base_image)

    dead = EnvClientConfig(
        pool_url=f"http://127.0.0.1:{free_port()}",
        token="x",
        retries=2,
        backoff=0.1,
        allocate_deadline=1,
        restart_grace=0,  # a pool that never comes back (a restart is test_pool_restart.py's)
    )
    async with EnvClient(dead) as client:
        t0 = time.monotonic()
        with pytest.raises(FleetUnavailable, match="unreachable"):
            await client.allocate(base_image)
        with pytest.raises(FleetUnavailable):
            await client.status()
        assert time.monotonic() - t0 < 30  # gave up: no endless retries on a pool that is not there


def test_config_from_env(monkeypatch, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    monkeypatch.setenv("SWE_POOL_URL", "http://pool:1")
    monkeypatch.delenv("SWE_POOL_TOKEN", raising=False)
    monkeypatch.setenv("SWE_POOL_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("SWE_CLIENT_RETRIES", "7")
    monkeypatch.setenv("SWE_CLIENT_ALLOCATE_DEADLINE", "12.5")
    cfg = EnvClientConfig.from_env(heartbeat_interval=5)
    assert (cfg.pool_url, cfg.token, cfg.retries, cfg.allocate_deadline, cfg.heartbeat_interval) == (
        "http://pool:1",
        "from-file",
        7,
        12.5,
        5,
    )
    assert "from-file" not in repr(cfg)
    assert issubclass(LeaseLost, FleetUnavailable) and issubclass(FleetUnavailable, FleetError)
