"""The pool's own CPU per routed call, and its added latency, against baselines measured in the same run.

Why: at scale the pool's routing cost is its CPU per call (one asyncio process), not the network; the
scale bench's 20k routing p99 measured a queue once that CPU outran the pool's share of the machine.
This bench isolates it on a small simulated fleet (`--nodes` in-memory exec servers, one pool process):
`--leases` leases, then `--execs` trivial execs through the client (`Lease.exec`, call replay on, as in
production) with `--in-flight` at once, and the same execs sent straight to the nodes. Per variant of
the pool (a fresh pool each):
- this tree with uvicorn on auto (uvloop + httptools where they import);
- this tree with `SWE_POOL_LOOP=asyncio SWE_POOL_HTTP=h11` (the pure-Python stack);
- `--baseline-tree PATH` (e.g. /work/main): another checkout's pool code, on auto.
It prints the pool's CPU per routed exec (/proc/<pid>/stat, minus its idle rate while the direct round
ran), the routed-minus-direct latency p50/p99, and each variant's CPU as a ratio of the first one's.
Variants alternate over `--rounds` so a load change hits them alike; `uptime`'s load is printed beside.

    python bench/route_bench.py [--nodes 4] [--leases 100] [--execs 2000] [--in-flight 20] \
        [--rounds 2] [--baseline-tree /work/main]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet
from swe_rl.fleet.pool.nodes import NodeSet
from swe_rl.fleet.pool.routing import NodeCalls

IMAGE = "swe-rl/bench-route:latest"
HERE = str(Path(__file__).resolve().parent.parent)


def cpu_s(pid: int, *, kernel_only: bool = False) -> float:
    """CPU seconds of a process (user and kernel, or kernel only), from /proc/<pid>/stat."""
    fields = open(f"/proc/{pid}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
    ticks = int(fields[12]) + (0 if kernel_only else int(fields[11]))
    return ticks / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000 if s else float("nan")


def load() -> str:
    return open("/proc/loadavg", encoding="ascii").read().split()[0]


@dataclass
class Variant:
    name: str
    tree: str
    env: dict[str, str] = field(default_factory=dict)
    cpu_per_exec: list[float] = field(default_factory=list)
    kernel_per_exec: list[float] = field(default_factory=list)
    routed: list[float] = field(default_factory=list)
    direct: list[float] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)


async def spread(n: int, in_flight: int, fn: object) -> list[float]:
    """Latency of n calls of fn(i), in_flight at once."""
    gate = asyncio.Semaphore(in_flight)
    out: list[float] = []

    async def one(i: int) -> None:
        async with gate:
            t = time.perf_counter()
            await fn(i)  # type: ignore[operator]
            out.append(time.perf_counter() - t)

    await asyncio.gather(*(one(i) for i in range(n)))
    return out


async def measure(v: Variant, args: argparse.Namespace) -> None:
    env = {
        "PYTHONPATH": v.tree,
        "SWE_POOL_LEASE_TTL": "900",
        "SWE_POOL_WARM_MIN": "0",
        **v.env,
    }
    with MemoryFleet(
        nodes=args.nodes,
        max_per_node=args.leases // args.nodes + 10,
        threads=4,
        pool_env=env,
        exec_env={"SWE_EXEC_WARM_BURST_WINDOW": "0"},
    ) as fleet:
        assert fleet.pool is not None
        pid = fleet.pool.pid
        client = EnvClient(
            EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=120, connect_timeout=30)
        )
        direct = [httpx.AsyncClient(timeout=120) for _ in range(2)]
        auth = {"Authorization": f"Bearer {fleet.token}"}
        try:
            leases: list[Lease] = list(
                await asyncio.gather(
                    *(client.allocate(IMAGE, instance_id=f"r{i}") for i in range(args.leases))
                )
            )

            async def routed(i: int) -> None:
                result = await leases[i % len(leases)].exec("echo ok", timeout=60)
                assert result.output == "ok\n"

            async def straight(i: int) -> None:
                lease = leases[i % len(leases)]
                resp = await direct[i % 2].post(
                    lease.node + "/container/exec",
                    json={"container_id": lease.container_id, "command": "echo ok", "timeout": 60},
                    headers=auth,
                )
                assert resp.json()["output"] == "ok\n"

            await spread(len(leases) * 2, args.in_flight, routed)  # warm-up: connections, per-node clients
            await spread(len(leases) * 2, args.in_flight, straight)
            t, c = time.perf_counter(), cpu_s(pid)
            v.direct += await spread(args.execs, args.in_flight, straight)
            idle = (cpu_s(pid) - c) / (time.perf_counter() - t)  # health checks, touches
            t, c, k = time.perf_counter(), cpu_s(pid), cpu_s(pid, kernel_only=True)
            v.routed += await spread(args.execs, args.in_flight, routed)
            wall = time.perf_counter() - t
            v.cpu_per_exec.append(max(0.0, cpu_s(pid) - c - idle * wall) / args.execs)
            v.kernel_per_exec.append((cpu_s(pid, kernel_only=True) - k) / args.execs)
            v.loads.append(load())
            await asyncio.gather(*(lease.close() for lease in leases))
        finally:
            await client.aclose()
            for http in direct:
                await http.aclose()


async def forwarders(args: argparse.Namespace) -> None:
    """The pool's two ways to a node, in this process: httpx (`NodeCalls.post`, every call before) against the
    lean client (`NodeCalls.route_post`, routed calls now); this process's CPU per call, alternating."""
    with MemoryFleet(nodes=1, max_per_node=10, threads=4) as fleet:
        url = fleet.exec_urls[0]
        nodes = NodeSet([url], down_after=2)
        node = nodes.get(url)
        node.healthy = True
        calls = NodeCalls([url], nodes, fleet.token, connect_timeout=30, shards=8)
        calls.open()
        try:
            made = await calls.post(node, "/container/create", {"image": IMAGE}, 60)
            payload = {"container_id": made.json()["container_id"], "command": "echo ok", "timeout": 60}
            cpu: dict[str, list[float]] = {"httpx": [], "lean": []}
            for _ in range(args.rounds * 2):
                for name, post in (("httpx", calls.post), ("lean", calls.route_post)):

                    async def one(i: int, post: Any = post) -> None:
                        assert (await post(node, "/container/exec", payload, 60)).json()["output"] == "ok\n"

                    await spread(args.in_flight * 2, args.in_flight, one)  # connections open
                    c = time.process_time()
                    await spread(args.execs // 2, args.in_flight, one)
                    cpu[name].append((time.process_time() - c) / (args.execs // 2))
        finally:
            await calls.aclose()
    h, lean = statistics.median(cpu["httpx"]), statistics.median(cpu["lean"])
    print(
        f"  forwarding alone ({args.execs // 2} execs x {args.rounds * 2}, {args.in_flight} in flight): httpx "
        f"{h * 1e3:.2f} ms CPU per call, lean client {lean * 1e3:.2f} ms: {h / lean:.1f}x less (load {load()})"
    )


async def main_async(args: argparse.Namespace) -> None:
    variants = [
        Variant("this tree, uvloop+httptools", HERE),
        Variant("this tree, asyncio+h11", HERE, {"SWE_POOL_LOOP": "asyncio", "SWE_POOL_HTTP": "h11"}),
    ]
    if args.baseline_tree:
        variants.append(Variant(f"{args.baseline_tree}, auto", str(Path(args.baseline_tree).resolve())))
    print(
        f"route_bench: {args.nodes} in-memory nodes, {args.leases} leases, {args.execs} execs "
        f"{args.in_flight} in flight, {args.rounds} rounds, cores={os.cpu_count()}, load {load()}"
    )
    for r in range(args.rounds):
        for v in variants:
            await measure(v, args)
            print(
                f"  round {r + 1} {v.name:40} pool CPU {v.cpu_per_exec[-1] * 1e3:.2f} ms/exec "
                f"(kernel {v.kernel_per_exec[-1] * 1e3:.2f}), load {v.loads[-1]}",
                flush=True,
            )
    await forwarders(args)
    first = statistics.median(variants[0].cpu_per_exec)
    print(
        f"  {'variant':40} {'CPU ms/exec':>11} {'kernel':>6} {'ratio':>6} {'routed-direct p50':>18} {'p99 ms':>7}"
    )
    for v in variants:
        cpu = statistics.median(v.cpu_per_exec)
        o50 = pct(v.routed, 0.5) - pct(v.direct, 0.5)
        o99 = pct(v.routed, 0.99) - pct(v.direct, 0.99)
        kernel = statistics.median(v.kernel_per_exec)
        print(
            f"  {v.name:40} {cpu * 1e3:>11.2f} {kernel * 1e3:>6.2f} {cpu / first:>6.2f} {o50:>18.2f} {o99:>7.2f}"
        )
    print(
        f"route: pool CPU {first * 1e3:.2f} ms per routed exec, one core routes {1 / first:.0f} execs/s "
        f"(load {variants[0].loads[-1]})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--leases", type=int, default=100)
    p.add_argument("--execs", type=int, default=2000)
    p.add_argument("--in-flight", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--baseline-tree", default="", help="another checkout whose pool is measured too")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
