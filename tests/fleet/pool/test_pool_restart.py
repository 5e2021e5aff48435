"""A pool killed with SIGKILL comes back with every lease, and destroys what a lost allocation left.

Real pool subprocess over two simulated exec servers (the in-memory backend, real HTTP on loopback).
The lost allocation is made deterministic: creates take 2 s on the nodes; the pool is frozen
(SIGSTOP) while one create is in flight, the node finishes that create (its container, labelled with
our owner and a lease id nobody recorded, is listed by the node), and only then is the pool killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest
from pool_fixtures import wait_for as pooled_wait_for

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet
from swe_rl.fleet.local import wait_healthy

pytestmark = pytest.mark.docker  # starts a fleet (no daemon needed): the fleet tier

LEASES = 50


def get(fleet: MemoryFleet, url: str) -> dict:
    # the nodes' own /status takes their token; the pool's lists its leases to the operator token
    token = fleet.operator_token if url.startswith(fleet.pool_url) else fleet.exec_token
    resp = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


def wait_for(check, what: str, timeout: float = 20.0):
    return pooled_wait_for(check, what, timeout)


def test_sigkilled_pool_recovers_every_lease_and_destroys_the_orphan():
    with MemoryFleet(
        nodes=2,
        max_per_node=40,
        latency_ms="2000,0,0",
        threads=64,
        pool_env={"SWE_POOL_WARM_MIN": "0", "SWE_POOL_LEASE_TTL": "600"},
        exec_env={"SWE_EXEC_WARM_BURST_WINDOW": "0"},
    ) as fleet:
        config = EnvClientConfig(
            pool_url=fleet.pool_url,
            token=fleet.token,
            heartbeat_interval=0.3,
            backoff=0.1,
            read_timeout=60,
            restart_grace=60,
        )

        def node_containers() -> dict[str, dict]:
            return {c["id"]: c for url in fleet.exec_urls for c in get(fleet, url + "/status")["containers"]}

        async def run() -> None:
            async with EnvClient(config) as client:
                leases: list[Lease] = await asyncio.gather(
                    *(client.allocate("img:r", instance_id=f"r-{i}") for i in range(LEASES))
                )
                for lease in leases:
                    lease.start_heartbeat()
                known = {lease.lease_id for lease in leases}

                # one allocation in flight: the pool has asked a node, the node is still creating
                in_flight = asyncio.create_task(client.allocate("img:r", request_id="in-flight-1"))
                await wait_for(
                    lambda: any(n["pending"] for n in get(fleet, fleet.pool_url + "/status")["nodes"]),
                    "the allocation to reach a node",
                )
                await asyncio.sleep(0.2)  # the create request is on its way (the node takes 2 s)
                assert fleet.pool is not None
                os.kill(fleet.pool.pid, signal.SIGSTOP)
                try:
                    orphans = await wait_for(
                        lambda: [c for c in node_containers().values() if c.get("lease_id") not in known],
                        "the node to finish the create the pool never recorded",
                    )
                finally:
                    fleet.kill_pool()  # a frozen pool would not answer the fixture's SIGTERM
                assert len(orphans) == 1
                orphan = orphans[0]["id"]

                # a safe call made while the pool is down is retried until it is back
                diff = asyncio.create_task(leases[0].diff())
                await asyncio.sleep(0.5)
                # started from this thread: a pool started from a worker thread (asyncio.to_thread) got
                # SIGKILL when that thread ended (PR_SET_PDEATHSIG follows the thread), and its logs were kept
                t0 = time.monotonic()
                fleet.start_pool(wait=False)
                await asyncio.to_thread(wait_healthy, fleet.pool_url, fleet.pool, poll=0.02)
                assert time.monotonic() - t0 < 30

                # the orphan was destroyed before the pool served; every lease was recovered
                assert orphan not in await asyncio.to_thread(node_containers)
                assert await asyncio.wait_for(diff, 60) == ""
                retried = await asyncio.wait_for(in_flight, 60)  # same request id: one new container
                assert retried.container_id != orphan
                status = await asyncio.to_thread(get, fleet, fleet.pool_url + "/status")
                assert status["totals"]["leases"] == LEASES + 1
                results = await asyncio.gather(*(lease.exec(f"echo {i}") for i, lease in enumerate(leases)))
                assert [r.output for r in results] == [f"{i}\n" for i in range(LEASES)]
                assert await client.heartbeat_all() == LEASES
                assert all(lease.lost is None for lease in leases)
                metrics = httpx.get(
                    fleet.pool_url + "/metrics", headers={"Authorization": f"Bearer {fleet.token}"}
                ).text
                assert 'swe_pool_leases_reclaimed_total{reason="orphan"} 1' in metrics

                await asyncio.gather(*(lease.close() for lease in [*leases, retried]))
                assert (await client.status())["totals"]["leases"] == 0
            await wait_for(lambda: not node_containers(), "every container to be destroyed")

        asyncio.run(run())
    assert fleet.log_dir is not None and not fleet.log_dir.exists()  # a clean stop: nothing died or was kept
