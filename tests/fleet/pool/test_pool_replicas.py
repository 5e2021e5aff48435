"""Pool replicas on one PostgreSQL lease record: real pool processes over simulated exec servers.

Two pool processes share a real PostgreSQL (Debian's server, started for the test; swe_rl/testing/
local_postgres.py) and the same simulated nodes (the real exec server app over the in-memory backend):
a lease allocated through one is used, heartbeated and released through the other; one killed with
SIGKILL loses no lease and a client holding both URLs carries on through the other; expiry fires once.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import httpx
import pytest

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.errors import LeaseLost
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

pytest.importorskip("psycopg", reason="the `replicas` extra (psycopg) is not installed")
pytestmark = pytest.mark.docker  # a simulated fleet (in-memory nodes, real pool processes): the fleet tier

IMAGE = "swe-rl/replicas-test:latest"


def replicated(database_url: str, **env: str) -> MemoryFleet:
    return MemoryFleet(
        nodes=2,
        max_per_node=20,
        images=[IMAGE],
        pool_env={
            "SWE_POOL_DATABASE_URL": database_url,
            "SWE_POOL_SYNC_INTERVAL": "0.3",
            "SWE_POOL_HEALTH_INTERVAL": "1",
            "SWE_POOL_WARM_MIN": "0",
            **env,
        },
    )


def client(fleet: MemoryFleet, *urls: str) -> EnvClient:
    # generous bounds: a loaded machine, not a speed test
    return EnvClient(
        EnvClientConfig(
            pool_url=",".join(urls), token=fleet.token, read_timeout=120, connect_timeout=30, backoff=0.2
        )
    )


def on(other: EnvClient, lease: Lease) -> Lease:
    """The same lease, driven through another client (another replica)."""
    return Lease(
        other,
        {"lease_id": lease.lease_id, "node": lease.node, "container_id": lease.container_id, "image": lease.image,
         "instance_id": lease.instance_id, "workdir": lease.workdir, "expires_at": lease.expires_at,
         "credential": lease.credential, "credential_expires_at": lease.credential_expires_at},
    )  # fmt: skip


def get(fleet: MemoryFleet, url: str, path: str) -> httpx.Response:
    return httpx.get(url + path, headers={"Authorization": f"Bearer {fleet.operator_token}"}, timeout=60)


def containers(fleet: MemoryFleet) -> int:
    return sum(len(httpx.get(u + "/status", headers={"Authorization": f"Bearer {fleet.exec_token}"}, timeout=60).json()["containers"]) for u in fleet.exec_urls)  # fmt: skip


def counter(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def until(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(check)
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_lease_from_one_replica_is_served_by_the_other_and_a_killed_replica_loses_none(postgres_url):
    with replicated(postgres_url, SWE_POOL_LEASE_TTL="600") as fleet:
        a, b = fleet.start_replica(), fleet.pool_url

        async def drive() -> None:
            ca, cb, both = client(fleet, a), client(fleet, b), client(fleet, a, b)
            try:
                # allocated through A; exec'd, heartbeated and released through B
                first = await ca.allocate(IMAGE, instance_id="one", request_id="req-one")
                again = await cb.allocate(IMAGE, instance_id="one", request_id="req-one")  # a retry, on B
                assert again.lease_id == first.lease_id and again.container_id == first.container_id
                via_b = on(cb, first)
                assert (await via_b.exec("echo from-b")).output.strip() == "from-b"
                assert await via_b.heartbeat() > time.time()
                await via_b.close()

                # A drops it from its cache once it reads B's release: its call on it is a lost lease
                async def gone_on_a() -> bool:
                    try:
                        await first.exec("echo still-there")
                    except LeaseLost:
                        return True
                    return False

                deadline = time.monotonic() + 60
                while not await gone_on_a():
                    assert time.monotonic() < deadline, "replica A still serves a lease B released"
                    await asyncio.sleep(0.2)
                assert containers(fleet) == 0  # its container destroyed (by B, which released it)

                # a client holding both URLs: leases made through A, then A is SIGKILLed
                held = [await both.allocate(IMAGE, instance_id=f"k{i}") for i in range(6)]
                assert (await held[0].exec("echo before")).output.strip() == "before"
                fleet.kill_replica(a)
                results = [
                    await lease.exec(f"echo after-{i}") for i, lease in enumerate(held)
                ]  # retried on B
                assert [r.output.strip() for r in results] == [f"after-{i}" for i in range(6)]
                for lease in held:
                    lease.start_heartbeat(1.0)
                assert await both.heartbeat_all() == 6  # every lease known to B: none lost
                status = get(fleet, b, "/status").json()
                assert {le["lease_id"] for le in status["leases"]} >= {le.lease_id for le in held}
                more = await both.allocate(IMAGE, instance_id="after-kill")  # allocations go on, on B
                for lease in [*held, more]:
                    await lease.close()
                await until(lambda: containers(fleet) == 0, "every container destroyed")
                assert get(fleet, b, "/status").json()["leases"] == []
            finally:
                for c in (ca, cb, both):
                    await c.aclose()

        asyncio.run(drive())


def test_expiry_fires_once_across_replicas(postgres_url):
    with replicated(postgres_url, SWE_POOL_LEASE_TTL="2") as fleet:
        a, b = fleet.start_replica(), fleet.pool_url

        async def drive() -> None:
            ca, cb = client(fleet, a), client(fleet, b)
            try:
                for i in range(4):  # allocated on both replicas, and never heartbeated
                    await ca.allocate(IMAGE, instance_id=f"a{i}")
                    await cb.allocate(IMAGE, instance_id=f"b{i}")
                kept = await cb.allocate(IMAGE, instance_id="kept")
                kept_on_a = on(ca, kept)
                assert containers(fleet) == 9

                async def beat() -> None:  # the kept lease lives through A's heartbeats only
                    while True:
                        await kept_on_a.heartbeat()
                        await asyncio.sleep(0.3)

                beating = asyncio.create_task(beat())
                await until(lambda: containers(fleet) == 1, "the 8 idle leases expired and destroyed")
                await asyncio.sleep(
                    3
                )  # more passes of both replicas: nothing expires twice, nor the kept one
                beating.cancel()
                await asyncio.gather(beating, return_exceptions=True)
                texts = [get(fleet, url, "/metrics").text for url in (a, b)]
                assert sum(counter(t, "swe_pool_leases_reclaimed_total", reason="ttl") for t in texts) == 8
                assert sum(counter(t, "swe_pool_destroys_total", outcome="ok") for t in texts) == 8
                assert (await kept.exec("echo alive")).output.strip() == "alive"
                await kept.close()
            finally:
                await ca.aclose()
                await cb.aclose()

        asyncio.run(drive())


def test_a_lease_released_through_one_replica_is_not_reported_lost_by_the_other(postgres_url):
    """A's touch pass finds the container of a lease B released before A read B's event (A's passes over
    the record are slowed down here): A drops it from its cache, it does not count it as lost."""
    with replicated(
        postgres_url, SWE_POOL_LEASE_TTL="600", SWE_POOL_SYNC_INTERVAL="3600", SWE_POOL_TOUCH_INTERVAL="0.3"
    ) as fleet:
        a, b = fleet.start_replica(), fleet.pool_url

        async def drive() -> None:
            ca, cb = client(fleet, a), client(fleet, b)
            try:
                lease = await ca.allocate(IMAGE, instance_id="both")
                await on(cb, lease).close()  # released and destroyed by B; A has not read that
                await until(lambda: containers(fleet) == 0, "the container destroyed")
                await asyncio.sleep(3)  # several touch passes of A
                with pytest.raises(LeaseLost):
                    await lease.exec("echo gone")
                metrics = get(fleet, a, "/metrics").text
                assert counter(metrics, "swe_pool_leases_reclaimed_total", reason="container_gone") == 0
            finally:
                await ca.aclose()
                await cb.aclose()

        asyncio.run(drive())


async def test_real_nodes_a_lease_and_its_snapshot_through_either_replica(
    fleet, pool_factory, fixture_instances, postgres_url, tmp_path
):
    """Over a real exec server (Docker): allocated through A, changed and snapshotted through B, restored
    into a new lease and the snapshot deleted through A, everything released through B."""
    inst = fixture_instances["pytoolz__toolz-9001"]
    (node,) = fleet(1, SWE_EXEC_SNAPSHOT_DIR=str(tmp_path / "snapshots"))
    token = "pytest-replicas-" + secrets.token_hex(8)
    shared = {
        "SWE_POOL_DATABASE_URL": postgres_url,
        "SWE_POOL_ID": "pytest-replicas-" + secrets.token_hex(4),  # one pool: one owner label
        "SWE_POOL_TOKEN": token,
        "SWE_POOL_SYNC_INTERVAL": "0.3",
        "SWE_POOL_SIGNING_KEY_FILE": str(tmp_path / "lease-signing.key"),  # every replica signs with one key
    }
    a, b = pool_factory([node], **shared), pool_factory([node], **shared)

    def config(url: str) -> EnvClientConfig:
        return EnvClientConfig(pool_url=url, token=token, read_timeout=300, connect_timeout=30)

    async with EnvClient(config(a.url), owner="job") as ca, EnvClient(config(b.url), owner="job") as cb:
        lease = await ca.allocate(inst.image, workdir="/testbed")
        via_b = on(cb, lease)
        await via_b.record_baseline()
        assert (await via_b.exec("printf through-b > /testbed/replica.txt")).ok
        info = await via_b.snapshot()
        branch = await ca.allocate(inst.image, from_snapshot=info.snapshot_id)  # A never saw the snapshot
        assert (await branch.exec("cat /testbed/replica.txt")).output == "through-b"
        assert await ca.delete_snapshot(info.snapshot_id)
        assert not await cb.delete_snapshot(info.snapshot_id)  # gone for B too: already deleted
        for held in (via_b, on(cb, branch)):
            await held.close()
    owned = [c for c in node.get("/status").json()["containers"] if c.get("owner") == shared["SWE_POOL_ID"]]
    deadline = time.monotonic() + 120
    while owned:  # destroyed in the background after the close
        assert time.monotonic() < deadline, owned
        time.sleep(0.5)
        owned = [
            c for c in node.get("/status").json()["containers"] if c.get("owner") == shared["SWE_POOL_ID"]
        ]
