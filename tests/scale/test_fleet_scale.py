"""Scale: 2,000 leases held at once over 20 simulated exec servers, driven by the async client.

The exec servers are the real app over the in-memory backend (`SWE_EXEC_BACKEND=memory`,
swe_rl/fleet/exec/memory_backend.py), all in one helper process; the pool is a real subprocess. Correctness only: every lease is allocated,
used and closed, nodes stay within their caps, and the pool ends empty. Latency and memory
figures are in bench/scale_bench.py.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

pytestmark = [
    pytest.mark.slow,
    pytest.mark.docker,
]  # a simulated 20-node fleet: the fleet tier, not the fast one

NODES = 20
LEASES = 2000
EXECS = 2
CAP = 110  # per node: 2,200 in all, so 2,000 fit with room for placement to matter
CLIENTS = 20  # like rollout workers: one EnvClient (connection pool) per 100 leases
IMAGES = [f"swe-rl/scale-{i}:latest" for i in range(8)]


def node_health(urls: list[str]) -> list[dict]:
    return [httpx.get(u + "/healthz", timeout=30).json() for u in urls]


def test_2000_concurrent_leases_over_20_nodes():
    with MemoryFleet(
        nodes=NODES,
        max_per_node=CAP,
        latency_ms="5,1,2",
        threads=8,
        pool_env={"SWE_POOL_LEASE_TTL": "1800", "SWE_POOL_HEALTH_INTERVAL": "2"},
    ) as fleet:
        # Bounds of waiting, not speed requirements: on a machine loaded 10x over its cores, this one process
        # drives 2,000 leases with a few percent of a core, and its event loop can take seconds per turn, so
        # even a loopback connect looks slow (the client's default 10 s connect timeout then fails calls
        # that were never in trouble).
        config = EnvClientConfig(
            pool_url=fleet.pool_url,
            token=fleet.token,
            connect_timeout=120,
            read_timeout=600,
            heartbeat_interval=60,
            allocate_deadline=900,
            backoff=0.2,
            # direct calls (the default): 2,000 execs at once straight to the nodes, each node's kept-alive
            # connections reused under the burst (a stale one is sent again on a fresh one: direct_client.py)
        )
        peak: dict = {}

        async def drive() -> list[str]:
            held = 0
            all_held = asyncio.Event()
            nodes_seen: list[str] = []

            async def one(i: int, client: EnvClient) -> None:  # one rollout: lease, wait for all, exec, close
                nonlocal held
                image = IMAGES[i % len(IMAGES)]
                async with client.lease(image, instance_id=f"scale-{i}") as env:
                    nodes_seen.append(env.node)
                    held += 1
                    if held == LEASES:
                        all_held.set()
                    await asyncio.wait_for(all_held.wait(), 900)  # every lease is held at the same time
                    if i == 0:
                        async with httpx.AsyncClient(timeout=600) as http:
                            peak["pool"] = (
                                await http.get(
                                    fleet.pool_url + "/status",
                                    headers={"Authorization": f"Bearer {fleet.token}"},
                                )
                            ).json()
                            peak["nodes"] = [(await http.get(u + "/healthz")).json() for u in fleet.exec_urls]
                    for k in range(EXECS):
                        # the call's time is also how long the pool keeps trying a node too busy to accept
                        result = await env.exec(f"echo {i}-{k}", timeout=600)
                        assert result.ok and result.output == f"{i}-{k}\n"

            clients = [EnvClient(config) for _ in range(CLIENTS)]
            try:
                await asyncio.gather(*(one(i, clients[i % CLIENTS]) for i in range(LEASES)))
                final = await clients[0].status()
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))
            assert final["totals"]["leases"] == 0
            return nodes_seen

        nodes_seen = asyncio.run(drive())

        # at the peak: the pool held every lease, spread over every node, each within its cap
        pool = peak["pool"]
        assert pool["totals"]["leases"] == LEASES
        assert len(set(nodes_seen)) == NODES and len(nodes_seen) == LEASES
        assert all(n["healthy"] and n["load"] <= CAP for n in pool["nodes"])
        for h in peak["nodes"]:
            assert h["backend"] == "memory"
            assert h["leased_containers"] <= CAP and h["managed_containers"] <= h["capacity"]
            assert h["warm_total"] <= h["max_warm"]
        # afterwards: nothing leased anywhere (warm containers may wait for the next group, within bounds)
        deadline = time.monotonic() + 120  # a bound on waiting for the background destroys, not a speed test
        while True:
            after = node_health(fleet.exec_urls)
            if all(h["leased_containers"] == 0 for h in after) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [h["leased_containers"] for h in after] == [0] * NODES
        assert all(h["warm_total"] <= h["max_warm"] for h in after)
