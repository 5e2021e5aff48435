"""Fleet latency benchmark: pool + exec server against direct Docker, in one run.

Prints p50/p99 (ms) of allocate, a trivial exec, diff and close through the
async client -> pool server -> exec server path at several concurrencies, next
to two baselines measured in the same run on the same machine:
- floor: a trivial exec through the Docker SDK directly on a running container;
- CLI: `docker exec` in a subprocess (what a docker-CLI wrapper pays).
Targets (printed, not asserted): fleet exec p50 <= 2x floor at concurrency 1,
<= 3x at 32, faster than the CLI; allocate p50 <= 1.5 s. Close and back-to-back
allocate (allocate -> close -> allocate ... on one image, no sleep, the pool's default
warming) are set against the SDK's own container remove and create+start: close p50
<= 10 ms, back-to-back allocate p50 <= 30 ms.

    python bench/fleet_bench.py [--concurrency 1 16 32] [--execs 20] [--loop 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import docker

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.local import LocalFleet

IMAGE = os.environ.get("SWE_BASE_IMAGE", "swe-rl/base:bookworm")
TRIVIAL = "true"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000


def row(name: str, conc: int, values: list[float]) -> dict:
    return {
        "op": name,
        "c": conc,
        "n": len(values),
        "p50": pct(values, 0.5),
        "p99": pct(values, 0.99),
        "mean": statistics.fmean(values) * 1000,
    }


async def fleet_round(client: EnvClient, conc: int, execs: int) -> list[dict]:
    alloc, ex, diffs, close = [], [], [], []

    async def one(i: int) -> None:
        t = time.perf_counter()
        lease = await client.allocate(IMAGE, instance_id=f"bench-{conc}-{i}", memory="512m", cpus=1.0)
        alloc.append(time.perf_counter() - t)
        try:
            await lease.exec("git init -q /testbed && touch /testbed/a && git -C /testbed add a")
            for _ in range(execs):
                t = time.perf_counter()
                await lease.exec(TRIVIAL, timeout=30)
                ex.append(time.perf_counter() - t)
            for _ in range(max(1, execs // 4)):
                t = time.perf_counter()
                await lease.diff()
                diffs.append(time.perf_counter() - t)
        finally:
            t = time.perf_counter()
            await lease.close()
            close.append(time.perf_counter() - t)

    await asyncio.gather(*(one(i) for i in range(conc)))
    return [
        row("fleet allocate", conc, alloc),
        row("fleet exec", conc, ex),
        row("fleet diff", conc, diffs),
        row("fleet close", conc, close),
    ]


async def back_to_back(client: EnvClient, n: int) -> list[dict]:
    """Sequential allocate -> close on one request, no sleep (a worker running episodes back to back)."""
    alloc, close = [], []
    for i in range(n + 1):
        t = time.perf_counter()
        lease = await client.allocate(IMAGE, instance_id=f"loop-{i}", memory="768m", cpus=1.0)
        if i:  # the first one is cold
            alloc.append(time.perf_counter() - t)
        t = time.perf_counter()
        await lease.close()
        close.append(time.perf_counter() - t)
    return [row("fleet allocate back-to-back", 1, alloc), row("fleet close back-to-back", 1, close)]


def pool_side_means(fleet: LocalFleet) -> dict[str, float]:
    """Mean handling time (ms) per op inside the pool, from its /metrics (no client or HTTP hop)."""
    req = urllib.request.Request(
        fleet.pool_url + "/metrics", headers={"Authorization": f"Bearer {fleet.token}"}
    )
    sums: dict[str, dict[str, float]] = {}
    for line in urllib.request.urlopen(req, timeout=30).read().decode().splitlines():
        m = re.match(r'swe_pool_call_seconds_(sum|count)\{op="(\w+)"\} (\S+)', line)
        if m:
            sums.setdefault(m[2], {})[m[1]] = float(m[3])
    return {op: 1000 * v["sum"] / v["count"] for op, v in sums.items() if v.get("count")}


def baseline_round(dc: docker.DockerClient, conc: int, execs: int) -> list[dict]:
    starts: list[float] = []

    def start(_: int):
        t = time.perf_counter()
        c = dc.containers.run(
            IMAGE,
            ["sleep", "infinity"],
            detach=True,
            init=True,
            network_mode="none",
            labels={"swe-rl.bench": "1"},
        )
        starts.append(time.perf_counter() - t)
        return c

    with ThreadPoolExecutor(conc) as pool:
        containers = list(pool.map(start, range(conc)))
    sdk, cli = [], []
    try:

        def sdk_worker(c) -> None:
            for _ in range(execs):
                t = time.perf_counter()
                c.exec_run(TRIVIAL)
                sdk.append(time.perf_counter() - t)

        def cli_worker(c) -> None:
            for _ in range(execs):
                t = time.perf_counter()
                subprocess.run(["docker", "exec", c.id, TRIVIAL], check=True, capture_output=True)
                cli.append(time.perf_counter() - t)

        with ThreadPoolExecutor(conc) as pool:
            list(pool.map(sdk_worker, containers))
        with ThreadPoolExecutor(conc) as pool:
            list(pool.map(cli_worker, containers))
    finally:
        removes: list[float] = []

        def remove(c) -> None:
            t = time.perf_counter()
            c.remove(force=True)
            removes.append(time.perf_counter() - t)

        with ThreadPoolExecutor(conc) as pool:
            list(pool.map(remove, containers))
    return [
        row("floor: SDK run (create+start)", conc, starts),
        row("floor: SDK exec", conc, sdk),
        row("baseline: docker CLI exec", conc, cli),
        row("floor: SDK remove", conc, removes),
    ]


async def main_async(args: argparse.Namespace) -> None:
    dc = docker.from_env(max_pool_size=64)
    dc.images.get(IMAGE)  # fails clearly when the base image is missing
    results: list[dict] = []
    with LocalFleet(
        exec_servers=1,
        max_containers_per_node=max(args.concurrency) + 4,
        exec_env={"SWE_EXEC_THREADS": "128"},
    ) as fleet:
        cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=300)
        async with EnvClient(cfg) as client:
            # Warm-up: first connections, first exec on the image.
            await fleet_round(client, 1, 3)
            for conc in args.concurrency:
                results += baseline_round(dc, conc, args.execs)
                results += await fleet_round(client, conc, args.execs)
            if args.loop:
                results += await back_to_back(client, args.loop)
            inside = pool_side_means(fleet)
    dc.close()

    print(f"\nfleet_bench: image={IMAGE} execs/lease={args.execs} cores={os.cpu_count()}")
    print(f"{'op':28} {'conc':>4} {'n':>5} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
    for r in results:
        print(f"{r['op']:28} {r['c']:>4} {r['n']:>5} {r['p50']:>9.1f} {r['p99']:>9.1f} {r['mean']:>9.1f}")
    print("\nratios (fleet exec / floor SDK exec, fleet exec / docker CLI exec) at p50 and p99:")
    by = {(r["op"], r["c"]): r for r in results}
    for conc in args.concurrency:
        f, s, c = (
            by[("fleet exec", conc)],
            by[("floor: SDK exec", conc)],
            by[("baseline: docker CLI exec", conc)],
        )
        target = 2.0 if conc == 1 else 3.0
        print(
            f"  c={conc:<3} vs floor p50 {f['p50'] / s['p50']:.2f}x p99 {f['p99'] / s['p99']:.2f}x"
            f" (target <= {target}x at p50)   vs CLI p50 {f['p50'] / c['p50']:.2f}x p99 {f['p99'] / c['p99']:.2f}x"
            f" (target < 1x)"
        )
        a, r = by[("fleet allocate", conc)], by[("floor: SDK run (create+start)", conc)]
        print(
            f"        allocate p50 {a['p50'] / 1000:.2f}s (target <= 1.5s), {a['p50'] / r['p50']:.2f}x the SDK's "
            f"own container create+start at the same concurrency"
        )
        cl, rm = by[("fleet close", conc)], by[("floor: SDK remove", conc)]
        print(
            f"        close p50 {cl['p50']:.1f} ms (target <= 10 ms), {cl['p50'] / rm['p50']:.2f}x the SDK's own "
            f"container remove (what a close that destroys on the request path pays)"
        )
    print(
        f"  inside the pool (mean handling, no client/HTTP hop): close {inside.get('close', 0):.2f} ms, "
        f"allocate {inside.get('allocate', 0):.1f} ms, exec {inside.get('exec', 0):.1f} ms"
    )
    if args.loop and ("floor: SDK run (create+start)", 1) in by:
        b, cl, r = (
            by[("fleet allocate back-to-back", 1)],
            by[("fleet close back-to-back", 1)],
            by[("floor: SDK run (create+start)", 1)],
        )
        rm = by[("floor: SDK remove", 1)]
        print(
            f"  back-to-back (allocate -> close, {b['n']} after a cold one): allocate p50 {b['p50']:.1f} ms "
            f"(target <= 30 ms), {b['p50'] / r['p50']:.2f}x the SDK's create+start; close p50 {cl['p50']:.1f} ms, "
            f"{cl['p50'] / rm['p50']:.2f}x the SDK's remove"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 32])
    p.add_argument("--execs", type=int, default=20, help="trivial execs per lease")
    p.add_argument("--loop", type=int, default=30, help="back-to-back allocates after a cold one (0: skip)")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
