"""The pool's own time per routed call: the node reports its time (`x-swe-node-seconds`), the pool
answers its share (`x-swe-pool-overhead-seconds`) and keeps it in a Prometheus histogram
(`swe_pool_overhead_seconds`), so the routing cost is measured per call, never as a difference of tails.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from swe_rl.fleet.call_headers import (
    CREDENTIAL_HEADER,
    NODE_SECONDS_HEADER,
    NODE_WAIT_HEADER,
    POOL_OVERHEAD_HEADER,
    POOL_OWN_HEADER,
)
from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet
from swe_rl.fleet.pool.metrics import Histogram, Metrics


def test_histogram_buckets_and_quantiles():
    h = Histogram((0.001, 0.01, 0.1))
    for ms in range(1, 101):  # 1..100 ms
        h.observe(ms / 1000)
    assert h.count == 100 and h.counts == [1, 9, 90, 0]
    assert 0.01 < h.quantile(0.5) < 0.1 and h.quantile(0.05) <= 0.01
    lines = h.lines("x", {"op": "exec"})
    assert 'x_bucket{op="exec",le="0.01"} 10' in lines and 'x_bucket{op="exec",le="+Inf"} 100' in lines
    assert 'x_count{op="exec"} 100' in lines
    m = Metrics()
    m.observe_overhead("exec", 0.003)
    m.observe_overhead("exec", -0.001)  # a clock's jitter never makes a negative overhead
    text = m.render([])
    assert "# TYPE swe_pool_overhead_seconds histogram" in text
    assert 'swe_pool_overhead_seconds_bucket{op="exec",le="0.0005"} 1' in text
    assert 'swe_pool_overhead_seconds_count{op="exec"} 2' in text


@pytest.mark.docker  # starts a fleet (no daemon needed): the fleet tier
def test_each_routed_call_carries_the_node_time_and_the_pool_overhead():
    with MemoryFleet(nodes=1, max_per_node=4, latency_ms="0,40,0") as fleet:

        async def run() -> list[tuple[float, float, float, float, float]]:
            cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token)
            async with EnvClient(cfg) as client:
                lease = await client.allocate("img:a")
                headers = {"Authorization": f"Bearer {fleet.token}", CREDENTIAL_HEADER: lease.credential}
                out = []
                async with httpx.AsyncClient(headers=headers, timeout=30) as http:
                    for _ in range(5):
                        t0 = time.monotonic()
                        r = await http.post(
                            f"{fleet.pool_url}/exec", json={"lease_id": lease.lease_id, "command": "echo hi"}
                        )
                        wall = time.monotonic() - t0
                        assert r.status_code == 200, r.text
                        out.append(
                            (
                                wall,
                                float(r.headers[NODE_SECONDS_HEADER]),
                                float(r.headers[POOL_OVERHEAD_HEADER]),
                                float(r.headers[NODE_WAIT_HEADER]),
                                float(r.headers[POOL_OWN_HEADER]),
                            )
                        )
                await lease.close()
                return out

        calls = asyncio.run(run())
        for wall, node, overhead, wait, own in calls:
            assert node >= 0.04  # the node's fake latency is in its own time
            assert overhead >= 0 and node + overhead <= wall
            # the pool's wait for the node holds the node's time; its own part is what is left of its
            # handling, so never more than the overhead (which also counts the node's queue and transit)
            assert wait >= node and 0 <= own <= overhead + 1e-6 and wait + own <= wall
        text = httpx.get(
            fleet.pool_url + "/metrics", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=30
        ).text
        assert 'swe_pool_overhead_seconds_count{op="exec"} 5' in text
