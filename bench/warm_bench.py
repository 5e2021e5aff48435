"""Warm vs cold allocate on real Docker, in one run: client -> pool -> exec server.

A local fleet (one exec server on this machine's Docker, one pool). For each
round it allocates a group of leases through the async client:
- cold: nothing warm (implicit warming off), every allocate runs `docker create + start`;
- warm: the group is warmed ahead through the pool's `POST /warm`, as a GRPO
  group's first allocate (`expected`) or an agent lease (its grading container)
  does, and the allocates claim started containers.
Both sequentially (one allocate at a time) and as a concurrent group (GRPO: the
same image n times at once). Target (printed, not asserted): warm allocate p50 <= 50 ms.

Then a tight loop on a second fleet with the pool's default warming (no hints, no
/warm call): allocate -> close -> allocate ... with no sleep, as a worker that runs
episodes back to back. Target: after the first (cold) allocate, p50 <= 30 ms.

Before the loop, in the same run (the machine's load is the same for both), Docker's own
create+start and remove throughput at parallelism 1/4/8 (the exec server's container
arguments, straight through the Docker SDK), and the allocate floor it implies: a warm pool
cannot hand out containers faster than the daemon starts them, so a loop turning at one
allocate + one close per lease waits about (1 / start rate - close time) per allocate.

    python bench/warm_bench.py [--group 8] [--rounds 3] [--loop 40] [--loop-only] [--throughput 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.local import LocalFleet

IMAGE = os.environ.get("SWE_BASE_IMAGE", "swe-rl/base:bookworm")
OPTS: dict[str, Any] = {"memory": "1g", "cpus": 1.0}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000


async def warm_up(fleet: LocalFleet, http: httpx.AsyncClient, count: int) -> None:
    """Ask the pool for `count` warm containers and wait until the node has them."""
    resp = await http.post(
        fleet.pool_url + "/warm",
        json={"image": IMAGE, "count": count, **OPTS},
        headers={
            "Authorization": f"Bearer {fleet.token}"
        },  # the pool's client token (http carries the node's)
    )
    resp.raise_for_status()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        health = (await http.get(fleet.exec_urls[0] + "/healthz")).json()
        if health["warm"].get(IMAGE, 0) >= count and health["warm_starting"] == 0:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("warm containers did not come up")


async def group(client: EnvClient, n: int, concurrent: bool, check_warm: bool | None) -> list[float]:
    times: list[float] = []
    leases = []

    async def one() -> None:
        t = time.perf_counter()
        lease = await client.allocate(IMAGE, expected=0, **OPTS)
        times.append(time.perf_counter() - t)
        leases.append(lease)

    if concurrent:
        await asyncio.gather(*(one() for _ in range(n)))
    else:
        for _ in range(n):
            await one()
    r = await leases[0].exec("git --version >/dev/null; echo ready")
    assert r.output == "ready\n"
    await asyncio.gather(*(lease.close() for lease in leases))
    return times


async def tight_loop(n: int, exec_env: dict[str, str]) -> tuple[float, list[float], list[float], dict]:
    """Sequential allocate -> close on one image, no sleep, default warming; (first, allocates, closes, stats)."""
    with LocalFleet(exec_servers=1, max_containers_per_node=16, exec_env=exec_env) as fleet:
        cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=300)
        headers = {"Authorization": f"Bearer {fleet.exec_token}"}  # for the node's own /status
        allocs: list[float] = []
        closes: list[float] = []
        async with EnvClient(cfg) as client, httpx.AsyncClient(headers=headers, timeout=60) as http:
            for _ in range(n + 1):
                t = time.perf_counter()
                lease = await client.allocate(IMAGE, **OPTS)
                allocs.append(time.perf_counter() - t)
                t = time.perf_counter()
                await lease.close()
                closes.append(time.perf_counter() - t)
            stats = (await http.get(fleet.exec_urls[0] + "/status")).json()["warm_stats"]
    return allocs[0], allocs[1:], closes, stats


def docker_throughput(parallel: int, n: int) -> tuple[float, float]:
    """Containers per second Docker creates+starts, then removes, `parallel` at a time (n containers)."""
    import docker

    client = docker.from_env()
    label = {"swe-rl.bench": f"throughput-{secrets.token_hex(4)}"}

    def start(_: int) -> str:
        c = client.containers.create(
            IMAGE,
            command=["sleep", "infinity"],
            labels=label,
            detach=True,
            init=True,
            mem_limit=OPTS["memory"],
            memswap_limit=OPTS["memory"],
            nano_cpus=int(OPTS["cpus"] * 1e9),
            pids_limit=1024,
            security_opt=["no-new-privileges"],
        )
        c.start()
        return c.id

    ids: list[str] = []
    try:
        with ThreadPoolExecutor(parallel) as pool:
            t = time.perf_counter()
            ids = list(pool.map(start, range(n)))
            started = n / (time.perf_counter() - t)
            t = time.perf_counter()
            list(pool.map(lambda cid: client.api.remove_container(cid, force=True), ids))
            removed = n / (time.perf_counter() - t)
            ids = []
        return started, removed
    finally:
        for c in client.containers.list(all=True, filters={"label": f"swe-rl.bench={label['swe-rl.bench']}"}):
            c.remove(force=True)
        client.close()


def report_throughput(n: int) -> dict[int, float]:
    print(f"\ndocker create+start / remove throughput ({n} containers each, cores={os.cpu_count()}):")
    rates: dict[int, float] = {}
    for parallel in (1, 4, 8):
        started, removed = docker_throughput(parallel, n)
        rates[parallel] = started
        print(
            f"  parallel {parallel}: start {started:5.2f}/s ({1000 / started:6.1f} ms per container), "
            f"remove {removed:5.2f}/s ({1000 / removed:6.1f} ms per container)"
        )
    return rates


async def main_async(args: argparse.Namespace) -> None:
    rates = report_throughput(args.throughput) if args.throughput else {}
    if args.loop_only:
        await report_loop(args.loop, rates, args.loop_parallel)
        return
    results: dict[tuple[str, str], list[float]] = {}
    with LocalFleet(
        exec_servers=1,
        max_containers_per_node=args.group * 2 + 4,
        exec_env={
            "SWE_EXEC_WARM_INTERVAL": "0.1",
            "SWE_EXEC_MAX_WARM": str(args.group),
            "SWE_EXEC_WARM_PARALLEL": "4",
        },
        pool_env={"SWE_POOL_WARM_MIN": "0", "SWE_POOL_HEALTH_INTERVAL": "1"},
    ) as fleet:
        cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=300)
        headers = {"Authorization": f"Bearer {fleet.exec_token}"}  # for the node's own /status
        async with EnvClient(cfg) as client, httpx.AsyncClient(headers=headers, timeout=60) as http:
            await group(client, 2, False, None)  # first connections, image in the page cache
            for _ in range(args.rounds):
                for mode in ("sequential", "concurrent"):
                    concurrent = mode == "concurrent"
                    results.setdefault(("cold", mode), []).extend(
                        await group(client, args.group, concurrent, False)
                    )
                    await warm_up(fleet, http, args.group)
                    await http.post(
                        fleet.pool_url + "/warm", json={"image": IMAGE, "count": 0, **OPTS}
                    )  # no refill
                    results.setdefault(("warm", mode), []).extend(
                        await group(client, args.group, concurrent, True)
                    )
            stats = (await http.get(fleet.exec_urls[0] + "/status")).json()["warm_stats"]

    print(f"\nwarm_bench: image={IMAGE} group={args.group} rounds={args.rounds} cores={os.cpu_count()}")
    print(f"{'allocate':8} {'mode':11} {'n':>4} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
    for (kind, mode), values in sorted(results.items()):
        print(
            f"{kind:8} {mode:11} {len(values):>4} {pct(values, 0.5):>9.1f} {pct(values, 0.99):>9.1f} "
            f"{statistics.fmean(values) * 1000:>9.1f}"
        )
    for mode in ("sequential", "concurrent"):
        w, c = results[("warm", mode)], results[("cold", mode)]
        print(
            f"  {mode}: warm p50 {pct(w, 0.5):.1f} ms (target <= 50 ms) vs cold p50 {pct(c, 0.5):.1f} ms: "
            f"{pct(c, 0.5) / pct(w, 0.5):.0f}x faster"
        )
    print(f"  exec server warm stats: {stats}")
    if args.loop:
        await report_loop(args.loop, rates, args.loop_parallel)


async def report_loop(n: int, rates: dict[int, float], parallel: str = "") -> None:
    if n <= 0:
        return
    for p in parallel.split(",") if parallel else [""]:
        await report_one_loop(n, rates, {"SWE_EXEC_WARM_PARALLEL": p} if p else {})


async def report_one_loop(n: int, rates: dict[int, float], exec_env: dict[str, str]) -> None:
    first, allocs, closes, loop_stats = await tight_loop(n, exec_env)
    settings = "".join(f", {k}={v}" for k, v in exec_env.items())
    print(
        f"\ntight loop (allocate -> close, no sleep, default warming{settings}): "
        f"{len(allocs)} allocates after a cold one of {first * 1000:.0f} ms"
    )
    print(
        f"  allocate p50 {pct(allocs, 0.5):.1f} ms p99 {pct(allocs, 0.99):.1f} ms "
        f"mean {statistics.fmean(allocs) * 1000:.1f} ms (target p50 <= 30 ms); "
        f"close p50 {pct(closes, 0.5):.1f} ms p99 {pct(closes, 0.99):.1f} ms"
    )
    print(f"  exec server warm stats: {loop_stats}")
    close_ms = pct(closes, 0.5)
    for parallel, rate in rates.items():
        floor = max(0.0, 1000 / rate - close_ms)
        print(
            f"  floor at Docker parallel {parallel}: {1000 / rate:.0f} ms per start - close p50 "
            f"{close_ms:.0f} ms = allocate mean >= ~{floor:.0f} ms once the warm pool is drawn down"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--group", type=int, default=8, help="leases per group (GRPO n)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--loop", type=int, default=40, help="allocates in the tight loop (0: skip it)")
    p.add_argument("--loop-only", action="store_true", help="run only the tight loop")
    p.add_argument(
        "--loop-parallel",
        default="",
        help="comma-separated SWE_EXEC_WARM_PARALLEL values, one tight loop each (default: the server's)",
    )
    p.add_argument(
        "--throughput",
        type=int,
        default=8,
        help="containers per Docker throughput measurement at parallelism 1/4/8 (0: skip it)",
    )
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
