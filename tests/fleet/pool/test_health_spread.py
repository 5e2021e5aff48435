"""The periodic health pass spreads its nodes' checks over the interval (no Docker, no node contacted).

All at once, 200 checks kept the pool's event loop busy for 100-300 ms every interval, and every routed
call in flight waited behind them: the tail of the pool's overhead at scale (docs/fleet.md, round six).
"""

from __future__ import annotations

import asyncio
import secrets
import time

from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.pool.nodes import Node
from swe_rl.fleet.pool.pool import Pool


def _pool(tmp_path, n: int, interval: float) -> Pool:
    cfg = PoolConfig(
        exec_urls=[f"http://127.0.0.1:{9 + i}" for i in range(n)],  # never contacted: checks are recorded
        exec_token="t",
        pool_token="pytest-client-token",
        pool_id=f"pytest-pool-{secrets.token_hex(4)}",
        db_path=str(tmp_path / "leases.db"),
        warm_min=0,
        health_interval=interval,
    ).finalize()
    return Pool(cfg)


async def _starts(pool: Pool, pass_: str) -> list[float]:
    starts: list[float] = []

    async def record(node: Node) -> None:
        starts.append(time.monotonic())

    pool._check_node = record  # type: ignore[method-assign]
    t0 = time.monotonic()
    await getattr(pool, pass_)()
    return sorted(s - t0 for s in starts)


async def test_the_periodic_pass_spreads_the_checks_over_half_the_interval(tmp_path):
    n, interval = 8, 0.8
    pool = _pool(tmp_path, n, interval)
    starts = await _starts(pool, "check_health_spread")
    assert len(starts) == n
    for i, s in enumerate(starts):  # node i starts no earlier than its share of the half interval
        assert s >= (interval / 2) * i / n - 0.001, (i, starts)


async def test_the_first_pass_checks_every_node_at_once(tmp_path):
    """After a start calls wait for their node's first check: that pass is not spread."""
    n, interval = 8, 600.0
    pool = _pool(tmp_path, n, interval)
    starts = await asyncio.wait_for(_starts(pool, "check_health"), 30)  # spread would take 262 s
    assert len(starts) == n
