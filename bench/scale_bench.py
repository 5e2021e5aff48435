"""Pool at scale on a simulated fleet: routing overhead, allocate latency, pool memory per lease.

Runs 20 in-memory exec servers (swe_rl/fleet/fakes/docker_client.py: the real exec server
app, no Docker; commands are not run) and a real pool server on loopback. For
each number of concurrent leases (default 1, 100, 1000) it holds that many
leases at once and measures, in the same run:
- routed exec: client -> pool -> exec server (the async client's Lease.exec);
- baseline: client -> exec server directly, on the same containers, at the same rate;
  routing overhead = routed - direct, at p50 and p99;
- allocate: the burst that opens the leases, and single allocates while they are held;
- pool memory per lease: growth of the pool process's VmRSS (/proc/<pid>/status) while the leases are
  held (opened 32 at a time; a burst's connection buffers are shown apart).
Leases exec at a fixed aggregate rate (agents mostly wait for the policy), so the
figures are latency at a sustainable load, not the saturation point of one laptop.
Targets (printed, not asserted): routing overhead p99 <= 10 ms at 1,000 leases;
pool memory <= 10 KiB per lease.

    python bench/scale_bench.py [--leases 1 100 1000] [--nodes 20] [--rate 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

import httpx

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

IMAGES = [f"swe-rl/bench-{i}:latest" for i in range(16)]
PER_CLIENT = 100  # leases per EnvClient, like one rollout worker


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000 if s else float("nan")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def exec_round(
    leases: list[Lease],
    execs: int,
    rate: float,
    direct: dict[str, list[httpx.AsyncClient]] | None,
    token: str,
) -> list[float]:
    """Each lease runs `execs` trivial commands; think times keep the aggregate near `rate` per second."""
    mean_think = len(leases) / rate
    latencies: list[float] = []

    async def one(i: int, lease: Lease) -> None:
        await asyncio.sleep(random.uniform(0, 2 * mean_think))
        for k in range(execs):
            t = time.perf_counter()
            if direct is None:
                result = await lease.exec("echo ok", timeout=60)
                assert result.output == "ok\n"
            else:
                shards = direct[lease.node]
                resp = await shards[i % len(shards)].post(
                    lease.node + "/container/exec",
                    json={"container_id": lease.container_id, "command": "echo ok", "timeout": 60},
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert resp.json()["output"] == "ok\n"
            latencies.append(time.perf_counter() - t)
            if k + 1 < execs:
                await asyncio.sleep(random.uniform(0, 2 * mean_think))

    await asyncio.gather(*(one(i, lease) for i, lease in enumerate(leases)))
    return latencies


async def run_level(fleet: MemoryFleet, n: int, args: argparse.Namespace) -> dict:
    assert fleet.pool is not None
    cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=300, allocate_deadline=300)
    clients = [EnvClient(cfg) for _ in range(max(1, (n + PER_CLIENT - 1) // PER_CLIENT))]
    direct = {u: [httpx.AsyncClient(timeout=120) for _ in range(8)] for u in fleet.exec_urls}
    # Memory: leases opened 32 at a time, so the growth is lease state, not the buffers of a burst's connections.
    gate = asyncio.Semaphore(32)

    async def open_gated(i: int) -> Lease:
        async with gate:
            return await clients[i % len(clients)].allocate(IMAGES[i % len(IMAGES)], instance_id=f"mem-{i}")

    rss_before = rss_kib(fleet.pool.pid)
    held = await asyncio.gather(*(open_gated(i) for i in range(n)))
    rss_held = rss_kib(fleet.pool.pid)
    await asyncio.gather(*(lease.close() for lease in held))
    alloc: list[float] = []

    async def allocate(i: int) -> Lease:
        t = time.perf_counter()
        lease = await clients[i % len(clients)].allocate(IMAGES[i % len(IMAGES)], instance_id=f"bench-{i}")
        alloc.append(time.perf_counter() - t)
        return lease

    leases = await asyncio.gather(*(allocate(i) for i in range(n)))
    rss_burst = rss_kib(fleet.pool.pid)
    execs = args.execs if n > 1 else 100
    routed, direct_lat = [], []
    for _ in range(2):  # alternate, so drift hits both the same
        routed += await exec_round(leases, execs, args.rate, None, fleet.token)
        direct_lat += await exec_round(leases, execs, args.rate, direct, fleet.token)
    single: list[float] = []  # allocate + close one at a time while the others are held
    for i in range(args.single):
        t = time.perf_counter()
        extra = await clients[0].allocate(IMAGES[i % len(IMAGES)])
        single.append(time.perf_counter() - t)
        await extra.close()
    await asyncio.gather(*(lease.close() for lease in leases))
    for c in clients:
        await c.aclose()
    for shards in direct.values():
        for http in shards:
            await http.aclose()
    return {
        "n": n,
        "alloc_burst": alloc,
        "alloc_single": single,
        "routed": routed,
        "direct": direct_lat,
        "rss_before": rss_before,
        "rss_held": rss_held,
        "rss_burst": rss_burst,
    }


async def memory_probe(fleet: MemoryFleet, n: int) -> tuple[int, float]:
    """Pool RSS growth per lease held, leases opened 32 at a time (lease state, not burst buffers)."""
    assert fleet.pool is not None
    cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=300)
    async with EnvClient(cfg) as client:
        gate = asyncio.Semaphore(32)

        async def open_one(i: int) -> Lease:
            async with gate:
                return await client.allocate(IMAGES[i % len(IMAGES)], instance_id=f"probe-{i}")

        before = rss_kib(fleet.pool.pid)
        leases = await asyncio.gather(*(open_one(i) for i in range(n)))
        after = rss_kib(fleet.pool.pid)
        await asyncio.gather(*(lease.close() for lease in leases))
    return n, (after - before) / n


async def main_async(args: argparse.Namespace) -> None:
    with MemoryFleet(
        nodes=args.nodes,
        max_per_node=max(args.leases) // args.nodes + 20,
        latency_ms=args.latency_ms,
        pool_env={"SWE_POOL_LEASE_TTL": "900"},
    ) as fleet:
        warmup = await run_level(fleet, 20, argparse.Namespace(**{**vars(args), "execs": 2, "single": 5}))
        del warmup
        memory = await memory_probe(fleet, max(args.leases))  # on a pool that has held no more than 20 leases
        results = [await run_level(fleet, n, args) for n in args.leases]

    print(
        f"\nscale_bench: {args.nodes} in-memory exec servers, fake latency create,exec,destroy = {args.latency_ms} ms, "
        f"aggregate exec rate {args.rate:g}/s, cores={os.cpu_count()}"
    )
    print(f"{'leases':>6} {'op':34} {'n':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for r in results:
        rows = [
            ("allocate (burst opening all leases)", r["alloc_burst"]),
            ("allocate (one, while all are held)", r["alloc_single"]),
            ("exec routed: client->pool->exec", r["routed"]),
            ("exec direct: client->exec (baseline)", r["direct"]),
        ]
        for name, values in rows:
            print(
                f"{r['n']:>6} {name:34} {len(values):>6} {pct(values, 0.5):>8.2f} {pct(values, 0.99):>8.2f}"
            )
    print(
        f"\npool memory: {memory[1]:.2f} KiB per lease over {memory[0]} leases held on a fresh pool "
        "(target <= 10 KiB)"
    )
    print("\nrouting overhead (routed - direct; a difference of tails: noisy on a busy machine):")
    for r in results:
        o50 = pct(r["routed"], 0.5) - pct(r["direct"], 0.5)
        o99 = pct(r["routed"], 0.99) - pct(r["direct"], 0.99)
        print(
            f"  {r['n']:>5} leases: overhead p50 {o50:6.2f} ms, p99 {o99:6.2f} ms (target p99 <= 10 ms at 1000); "
            f"pool RSS {r['rss_held'] / 1024:.1f} MiB, {r['rss_burst'] / 1024:.1f} MiB after the burst of "
            f"{r['n']} allocates at once"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--leases", type=int, nargs="+", default=[1, 100, 1000])
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--execs", type=int, default=4, help="execs per lease per round")
    p.add_argument(
        "--rate", type=float, default=150.0, help="aggregate execs per second (all leases together)"
    )
    p.add_argument(
        "--single", type=int, default=50, help="single allocates measured while the leases are held"
    )
    p.add_argument("--latency-ms", default="0", help="fake create,exec,destroy latency of the memory backend")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
