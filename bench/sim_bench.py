"""What the simulated fleet itself costs: CPU of the in-memory exec servers' helper process per request.

The scale bench and the scale tests run hundreds of simulated nodes in one helper process beside the pool
they measure, on the same cores; every millisecond the simulation spends per request is taken from the
pool. For each node count (default 20, then 200) the bench starts the helper
(`python -m swe_rl.fleet.fakes.simulated_fleet`), keeps `--idle` idle connections open per node (as a
pool's kept-alive connections are), and sends `--requests` POST /containers/touch (what heartbeats send)
spread over the nodes, `--in-flight` at once, through the pool's own node client. It prints the helper's
idle CPU, its CPU per request, the throughput and latency seen, and the ratio of the largest node count's
CPU per request to the smallest's (1.0: the simulation's cost does not grow with its node count).

    python bench/sim_bench.py [--nodes 20 200] [--requests 4000] [--in-flight 100]

Last line: `sim: helper CPU per request at N nodes X ms, at M nodes Y ms, ratio R`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time

from scale_bench import cpu_s, pct  # a sibling script: bench/ is on the path when run as a script

from swe_rl.fleet.pool.node_wire import NodeWire


async def measure(nodes: int, args: argparse.Namespace) -> dict[str, float]:
    token = secrets.token_hex(24)
    helper = subprocess.Popen(
        [sys.executable, "-m", "swe_rl.fleet.fakes.simulated_fleet", "--nodes", str(nodes)],
        env={**os.environ, "SWE_EXEC_TOKEN": token, "SWE_LOG_LEVEL": "ERROR"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    idle: list[asyncio.StreamWriter] = []
    wires: list[NodeWire] = []
    try:
        assert helper.stdout is not None
        urls = json.loads(helper.stdout.readline())["urls"]
        for url in urls:
            for _ in range(args.idle):
                idle.append((await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1])))[1])
        wires = [NodeWire(u, token, ssl_context=None, connect_timeout=60, keep=64) for u in urls]
        await asyncio.sleep(2)
        c0 = cpu_s(helper.pid)
        await asyncio.sleep(args.idle_seconds)
        idle_share = (cpu_s(helper.pid) - c0) / args.idle_seconds
        gate = asyncio.Semaphore(args.in_flight)
        latencies: list[float] = []

        async def one(i: int) -> None:
            async with gate:
                t = time.perf_counter()
                answer = await wires[i % len(wires)].post("/containers/touch", {"container_ids": []}, 120)
                assert answer.status_code == 200, answer.text
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(one(i) for i in range(len(wires))))  # every node's connections made
        latencies.clear()
        c0, t0 = cpu_s(helper.pid), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(args.requests)))
        wall, used = time.perf_counter() - t0, cpu_s(helper.pid) - c0
        return {
            "idle": idle_share,
            "cpu_ms": used / args.requests * 1000,
            "rate": args.requests / wall,
            "p50": pct(latencies, 0.5),
            "p99": pct(latencies, 0.99),
        }
    finally:
        for wire in wires:
            wire.close()
        for writer in idle:
            writer.close()
        helper.terminate()
        helper.wait(60)


async def main(args: argparse.Namespace) -> None:
    print(
        f"sim_bench: {args.requests} touches, {args.in_flight} in flight, {args.idle} idle connections per node"
    )
    rows = {}
    for n in args.nodes:
        r = rows[n] = await measure(n, args)
        print(
            f"  {n} nodes: idle {r['idle'] * 100:.1f}% of a core, {r['cpu_ms']:.2f} ms helper CPU per request, "
            f"{r['rate']:.0f} requests/s, p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms",
            flush=True,
        )
    lo, hi = min(rows), max(rows)
    print(
        f"sim: helper CPU per request at {lo} nodes {rows[lo]['cpu_ms']:.2f} ms, at {hi} nodes "
        f"{rows[hi]['cpu_ms']:.2f} ms, ratio {rows[hi]['cpu_ms'] / rows[lo]['cpu_ms']:.2f}"
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[20, 200])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--in-flight", type=int, default=100)
    p.add_argument("--idle", type=int, default=10, help="idle connections kept open per node")
    p.add_argument("--idle-seconds", type=float, default=5.0)
    asyncio.run(main(p.parse_args()))
