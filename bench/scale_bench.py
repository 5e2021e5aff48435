"""Pool at scale on a simulated fleet: routing overhead, allocate burst, heartbeat cost, memory, restart.

Runs `--nodes` in-memory exec servers (swe_rl/fleet/exec/memory_backend.py: the real exec server app,
no Docker; commands are not run; in one helper process, or `--node-processes` of them) and a real pool server process on
loopback. For each number of leases (default 1,000, 5,000, 20,000) a fresh pool holds that many at
once, every one of them allocated, used, heartbeated and closed, and the bench measures in the same run:
- allocate burst: the allocates opening every lease (`--burst` in flight at once), p50/p99;
- pool overhead: one exec per lease through the pool (client -> pool -> exec server); each answer
  carries the pool's own time for that call (`x-swe-pool-overhead-seconds`: its handling minus the
  node's reported time), and p50/p99 are of that per-call distribution; beside it the pool's handling
  minus its wait for the node's answer (`x-swe-pool-own-seconds`: a request queued at the node or in
  transit is not the pool's), and the pool's wait for a CPU (its run-queue time, /proc schedstat); the same exec sent straight
  to the exec server, at the same aggregate rate, is shown beside it (routed minus direct tails, the
  old figure, which two independent tails made swing from -115 to +663 ms);
- heartbeat cost: pool CPU per lease-beat, for the client's batched heartbeat (one request per client
  for all its leases) against one request per lease, each minus the idle pool's CPU over the same
  time; shown per lease per second at the production interval (30 s);
- pool memory: growth of the pool's VmRSS (/proc/<pid>/status) from the fresh pool to all leases held,
  per lease (the burst's connection buffers included);
- restart: the pool is killed with SIGKILL while it holds every lease and started again; from the new
  process, the bench times the pool's first answer (every lease loaded from the store: it serves while
  its nodes are checked, a call waiting for its own node's check), the first exec on a recovered lease
  (restart to serving) and /healthz 200 (every node checked and reconciled); then every lease is
  heartbeated and runs one exec through the new pool;
- CPU seconds of the pool and of the simulated exec servers in each phase, so the pool's own cost
  shows apart from the simulation's (both share this machine's cores with the bench's clients).
Checks (asserted): every lease allocated and held at once, no node over its cap (the pool's count and
each node's own), every lease recovered after the restart and serving, the pool empty at the end.
Targets (printed, not asserted): pool overhead p99 <= 10 ms and pool memory <= 2 KiB per lease
at 20,000 leases; restart to serving <= 5 s. `--pool-cpu N` pins the pool process to core N and this
process and the simulated nodes to the others (`os.sched_setaffinity`, what `taskset -p` does), so the
pool's figures are not its wait for a core the simulation holds.

    python bench/scale_bench.py [--leases 1000 5000 20000] [--nodes 200] [--rate 300] [--burst 1000]
        [--pool-cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from _common import cpu_s, gated, pct, pin  # bench/_common.py (bench/ is on the path of a script)

from swe_rl.fleet.call_headers import CREDENTIAL_HEADER, POOL_OVERHEAD_HEADER, POOL_OWN_HEADER
from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

IMAGES = [f"swe-rl/bench-{i}:latest" for i in range(16)]
PER_CLIENT = 100  # leases per EnvClient, like one rollout worker
PRODUCTION_HEARTBEAT = 30.0  # the client's default interval, seconds


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's main thread (the pool's event loop) spent runnable but waiting for a CPU
    (/proc/<pid>/schedstat, second field). Why: it tells a pool slowed by its own work from one that
    waits for a core other processes hold (a shared machine)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Phases:
    """Wall time and CPU seconds of the pool and of the simulated exec servers, and the pool's wait for
    a CPU, per phase."""

    def __init__(self, fleet: MemoryFleet) -> None:
        self.fleet = fleet
        self.rows: list[tuple[str, float, float, float, float]] = []

    async def run(self, name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        assert self.fleet.pool is not None and self.fleet.helpers
        pool, helpers = self.fleet.pool.pid, [h.pid for h in self.fleet.helpers]
        t, p, w = time.perf_counter(), cpu_s(pool), runqueue_wait_s(pool)
        h = sum(cpu_s(pid) for pid in helpers)
        result = await fn()
        assert self.fleet.pool is not None
        same = self.fleet.pool.pid == pool
        pool_cpu = cpu_s(self.fleet.pool.pid) - (p if same else 0.0)
        wait = runqueue_wait_s(self.fleet.pool.pid) - (w if same else 0.0)
        self.rows.append(
            (name, time.perf_counter() - t, pool_cpu, sum(cpu_s(pid) for pid in helpers) - h, wait)
        )
        return result


async def exec_round(
    leases: list[Lease],
    rate: float,
    direct: dict[str, list[httpx.AsyncClient]] | None,
    token: str,
    in_flight: int,
    pool_url: str = "",
    overheads: list[float] | None = None,
    owns: list[float] | None = None,
) -> list[float]:
    """One trivial command per lease, spread so the aggregate stays near `rate` per second, at most
    `in_flight` at once (a machine that falls behind the rate queues them here, not in the pool's backlog).
    Without `direct` through the pool at `pool_url`, each call's pool overhead appended to `overheads`."""
    span = len(leases) / rate
    latencies: list[float] = []
    gate = asyncio.Semaphore(in_flight)
    auth = {"Authorization": f"Bearer {token}"}
    routed = [httpx.AsyncClient(timeout=120) for _ in range(4)] if direct is None else []

    async def one(i: int, lease: Lease) -> None:
        await asyncio.sleep(random.uniform(0, span))
        async with gate:
            await timed(i, lease)

    async def timed(i: int, lease: Lease) -> None:
        t = time.perf_counter()
        if direct is None:
            resp = await routed[i % len(routed)].post(
                pool_url + "/exec",
                json={"lease_id": lease.lease_id, "command": "echo ok", "timeout": 60},
                headers={**auth, CREDENTIAL_HEADER: lease.credential},  # every call on a lease needs it
            )
            assert resp.status_code == 200 and resp.json()["output"] == "ok\n", resp.text
            if overheads is not None:
                overheads.append(float(resp.headers[POOL_OVERHEAD_HEADER]))
            if owns is not None:
                owns.append(float(resp.headers[POOL_OWN_HEADER]))
        else:
            shards = direct[lease.node]
            resp = await shards[i % len(shards)].post(
                lease.node + "/container/exec",
                json={"container_id": lease.container_id, "command": "echo ok", "timeout": 60},
                headers=auth,
            )
            assert resp.json()["output"] == "ok\n"
        latencies.append(time.perf_counter() - t)

    try:
        await asyncio.gather(*(one(i, lease) for i, lease in enumerate(leases)))
    finally:
        for http in routed:
            await http.aclose()
    return latencies


def pin_fleet(fleet: MemoryFleet, cpu: int | None) -> None:
    """The pool on core `cpu`, this process and the simulated nodes on the other cores (no-op: None).
    Every thread of each (`_common.pin`: an affinity set on a pid alone moves only its main thread)."""
    if cpu is None or fleet.pool is None:
        return
    others = (os.sched_getaffinity(0) | {cpu}) - {cpu} or {cpu}
    pin(fleet.pool.pid, {cpu})
    pin(os.getpid(), others)
    for helper in fleet.helpers:
        pin(helper.pid, others)


async def pool_status(fleet: MemoryFleet) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=120) as http:
        resp = await http.get(
            fleet.pool_url + "/status", headers={"Authorization": f"Bearer {fleet.operator_token}"}
        )
        return resp.json()


async def check_caps(fleet: MemoryFleet, n: int) -> None:
    status = await pool_status(fleet)
    assert status["totals"]["leases"] == n, status["totals"]
    assert all(node["healthy"] and node["load"] <= node["cap"] for node in status["nodes"])
    async with httpx.AsyncClient(timeout=120) as http:
        health = await asyncio.gather(*(http.get(u + "/healthz") for u in fleet.exec_urls))
    cap = max(node["cap"] for node in status["nodes"])
    assert all(h.json()["leased_containers"] <= cap for h in health)
    assert sum(h.json()["leased_containers"] for h in health) == n


async def heartbeat_cost(
    fleet: MemoryFleet, clients: list[EnvClient], leases: list[Lease], single_sample: int
) -> dict[str, float]:
    """Pool CPU per lease-beat, batched and one request per lease, each minus the idle pool's CPU."""
    assert fleet.pool is not None
    pid = fleet.pool.pid
    t, c = time.perf_counter(), cpu_s(pid)
    await asyncio.sleep(5)
    idle = (cpu_s(pid) - c) / (time.perf_counter() - t)  # health checks and touches of 200 nodes
    rounds = 3
    t, c = time.perf_counter(), cpu_s(pid)
    for _ in range(rounds):
        counts = await asyncio.gather(*(client.heartbeat_all() for client in clients))
        assert sum(counts) == len(leases)  # every lease heartbeated, none lost
    wall = time.perf_counter() - t
    batched = max(0.0, cpu_s(pid) - c - idle * wall) / (rounds * len(leases))
    some = leases[:single_sample]  # one request per lease: the baseline, on a sample
    t, c = time.perf_counter(), cpu_s(pid)
    await gated(len(some), 200, lambda i: some[i].heartbeat())
    wall_single = time.perf_counter() - t
    single = max(0.0, cpu_s(pid) - c - idle * wall_single) / len(some)
    return {"idle": idle, "batched": batched, "single": single, "batched_wall": wall / rounds}


async def restart_timings(fleet: MemoryFleet, lease: Lease) -> dict[str, float]:
    """Seconds from the new pool process to: its first answer (/healthz, any status: every lease loaded),
    the first exec on a recovered lease answered (sent at once; the client rides the refused connections
    out), and every node checked and reconciled (/healthz 200)."""
    t0 = time.perf_counter()
    fleet.start_pool(wait=False)

    async def first_exec() -> float:
        result = await lease.exec("echo ok", timeout=60, idempotent=True)
        assert result.output == "ok\n"
        return time.perf_counter() - t0

    exec_task = asyncio.create_task(first_exec())
    answering = ready = 0.0
    async with httpx.AsyncClient(timeout=5) as http:
        while not ready:
            try:
                code = (await http.get(fleet.pool_url + "/healthz")).status_code
            except httpx.HTTPError:
                code = 0
            now = time.perf_counter() - t0
            answering = answering or (now if code else 0.0)
            ready = now if code == 200 else 0.0
            assert now < 300, "the pool was not ready 300 s after its restart"
            await asyncio.sleep(0.02)
    return {"answering": answering, "first_exec": await exec_task, "ready": ready}


async def run_level(fleet: MemoryFleet, n: int, args: argparse.Namespace) -> dict[str, Any]:
    assert fleet.pool is not None
    phases = Phases(fleet)
    cfg = EnvClientConfig(
        pool_url=fleet.pool_url,
        token=fleet.token,
        read_timeout=300,
        allocate_deadline=300,
        heartbeat_interval=PRODUCTION_HEARTBEAT,
        restart_grace=120,
        connect_timeout=60,  # a loaded 2-core machine can take seconds to accept a connection
    )
    clients = [EnvClient(cfg) for _ in range(max(1, (n + PER_CLIENT - 1) // PER_CLIENT))]
    direct = {u: [httpx.AsyncClient(timeout=120) for _ in range(2)] for u in fleet.exec_urls}
    # warm-up: the pool makes its per-node HTTP clients on first use; make them before the baseline
    warm = await gated(4 * len(fleet.exec_urls), args.burst, lambda i: clients[0].allocate(IMAGES[i % 16]))
    await gated(len(warm), args.burst, lambda i: warm[i].exec("true"))
    await gated(len(warm), args.burst, lambda i: warm[i].close())
    await asyncio.sleep(2)  # their destroys
    rss_fresh = rss_kib(fleet.pool.pid)
    alloc: list[float] = []

    async def allocate(i: int) -> Lease:
        t = time.perf_counter()
        lease = await clients[i % len(clients)].allocate(IMAGES[i % len(IMAGES)], instance_id=f"bench-{i}")
        alloc.append(time.perf_counter() - t)
        lease.start_heartbeat()  # batched with its client's other leases, every 30 s
        return lease

    leases: list[Lease] = await phases.run("allocate burst", lambda: gated(n, args.burst, allocate))
    rss_held = rss_kib(fleet.pool.pid)
    await check_caps(fleet, n)
    sample = random.sample(leases, min(n, args.sample))  # exec latency is measured on a sample
    overheads: list[float] = []
    owns: list[float] = []
    routed = await phases.run(
        "exec routed",
        lambda: exec_round(sample, args.rate, None, fleet.token, args.burst, fleet.pool_url, overheads, owns),
    )
    direct_lat = await phases.run(
        "exec direct", lambda: exec_round(sample, args.rate, direct, fleet.exec_token, args.burst)
    )
    beats = await phases.run("heartbeats", lambda: heartbeat_cost(fleet, clients, leases, args.sample))

    # restart: SIGKILL with every lease held, then a new pool on the same store and port
    fleet.kill_pool(signal.SIGKILL)
    restart = await restart_timings(fleet, random.choice(leases))
    pin_fleet(fleet, args.pool_cpu)
    status = await pool_status(fleet)
    assert status["totals"]["leases"] == n, status["totals"]  # every lease recovered from the store
    recovered = await asyncio.gather(*(client.heartbeat_all() for client in clients))
    assert sum(recovered) == n
    serving_check = leases if args.exec_all_after_restart else sample  # every lease was heartbeated above
    after = await phases.run(
        "exec after restart",
        lambda: exec_round(serving_check, args.rate, None, fleet.token, args.burst, fleet.pool_url),
    )
    rss_restarted = rss_kib(fleet.pool.pid)

    await phases.run("close", lambda: gated(n, args.burst, lambda i: leases[i].close()))
    status = await pool_status(fleet)
    assert status["totals"]["leases"] == 0  # the pool ends empty
    for c in clients:
        await c.aclose()
    for shards in direct.values():
        for http in shards:
            await http.aclose()
    return {
        "n": n,
        "alloc_burst": alloc,
        "routed": routed,
        "overhead": overheads,
        "own": owns,
        "direct": direct_lat,
        "after_restart": after,
        "rss_fresh": rss_fresh,
        "rss_held": rss_held,
        "rss_restarted": rss_restarted,
        "beats": beats,
        "restart": restart,
        "phases": phases.rows,
    }


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    n = r["n"]
    print(f"\n{n} leases over {args.nodes} nodes (burst {args.burst} in flight, exec rate {args.rate:g}/s)")
    print(f"  {'op':38} {'n':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for name, values in (
        ("allocate (burst opening all leases)", r["alloc_burst"]),
        ("exec routed: client->pool->exec", r["routed"]),
        ("exec direct: client->exec (baseline)", r["direct"]),
        ("exec routed, after the restart", r["after_restart"]),
    ):
        print(f"  {name:38} {len(values):>6} {pct(values, 0.5):>8.2f} {pct(values, 0.99):>8.2f}")
    o50 = pct(r["routed"], 0.5) - pct(r["direct"], 0.5)
    o99 = pct(r["routed"], 0.99) - pct(r["direct"], 0.99)
    print(
        f"  pool overhead per call: p50 {pct(r['overhead'], 0.5):.2f} ms, p99 {pct(r['overhead'], 0.99):.2f} ms "
        f"(target p99 <= 10 ms; routed - direct tails: p50 {o50:.2f} ms, p99 {o99:.2f} ms)"
    )
    print(
        f"  pool's own time per call (its handling minus its wait for the node's answer: the node's queue "
        f"and the transit out): p50 {pct(r['own'], 0.5):.2f} ms, p99 {pct(r['own'], 0.99):.2f} ms"
    )
    cpu = {name: pool_cpu for name, _, pool_cpu, _, _ in r["phases"]}
    sim = {name: helper_cpu for name, _, _, helper_cpu, _ in r["phases"]}
    wait = {name: pool_wait for name, _, _, _, pool_wait in r["phases"]}
    per_exec = cpu["exec routed"] / max(1, len(r["routed"]))
    wait_per_exec = wait["exec routed"] / max(1, len(r["routed"]))
    print(
        f"  pool's wait for a CPU (run queue, its event loop's thread) in the routed phase: "
        f"{wait['exec routed']:.2f} s, {wait_per_exec * 1e3:.2f} ms per routed exec against "
        f"{per_exec * 1e3:.2f} ms of its CPU: what a call's overhead waits beyond the pool's own work"
    )
    print(
        f"  pool CPU per routed exec {per_exec * 1e3:.2f} ms (simulated node {sim['exec direct'] / max(1, len(r['direct'])) * 1e3:.2f} ms "
        f"per direct exec): at {args.rate:g} execs/s the pool needs {per_exec * args.rate:.2f} of a core "
        f"(the measurement queues on the machine, not the pool, once that nears the pool's share of {os.cpu_count()} cores)"
    )
    b = r["beats"]
    per_s = b["batched"] / PRODUCTION_HEARTBEAT
    print(
        f"  heartbeat: {b['batched'] * 1e6:.1f} us pool CPU per lease-beat batched vs {b['single'] * 1e6:.1f} us "
        f"one request per lease ({b['single'] / max(b['batched'], 1e-9):.0f}x); at a {PRODUCTION_HEARTBEAT:g} s "
        f"interval {per_s * 1e6:.2f} us per lease per second, {n * per_s * 100:.2f}% of a core for all "
        f"(one request per lease: {n * b['single'] / PRODUCTION_HEARTBEAT * 100:.1f}%); "
        f"idle pool {b['idle'] * 100:.1f}% of a core"
    )
    kib = (r["rss_held"] - r["rss_fresh"]) / n
    print(
        f"  pool RSS: fresh {r['rss_fresh'] / 1024:.1f} MiB, {r['rss_held'] / 1024:.1f} MiB holding {n} "
        f"({kib:.2f} KiB per lease, target <= 2), {r['rss_restarted'] / 1024:.1f} MiB after the restart"
    )
    rs = r["restart"]
    print(
        f"  restart (SIGKILL, {n} leases): answering after {rs['answering']:.2f} s, first exec on a recovered "
        f"lease after {rs['first_exec']:.2f} s, every node reconciled after {rs['ready']:.2f} s (target <= 5 s)"
    )
    print(f"  {'phase':22} {'wall s':>7} {'pool cpu s':>10} {'pool wait s':>11} {'exec sim cpu s':>14}")
    for name, wall, pool_cpu, helper_cpu, pool_wait in r["phases"]:
        print(f"  {name:22} {wall:>7.1f} {pool_cpu:>10.1f} {pool_wait:>11.1f} {helper_cpu:>14.1f}")


async def main_async(args: argparse.Namespace) -> None:
    top = max(args.leases)
    with MemoryFleet(
        nodes=args.nodes,
        max_per_node=top // args.nodes + 20,
        latency_ms=args.latency_ms,
        threads=args.threads,
        node_processes=args.node_processes or -(-args.nodes // 25),
        pool_env={"SWE_POOL_LEASE_TTL": "900", **({} if args.warm else {"SWE_POOL_WARM_MIN": "0"})},
        # The nodes reap on their default interval: a create being recorded is never unknown to the reaper.
        exec_env={} if args.warm else {"SWE_EXEC_WARM_BURST_WINDOW": "0"},
    ) as fleet:
        print(
            f"scale_bench: {args.nodes} in-memory exec servers, fake latency {args.latency_ms} ms, cores={os.cpu_count()}"
        )
        results = []
        for n in args.leases:
            fleet.kill_pool(signal.SIGTERM)  # a fresh pool per level: its memory is this level's
            fleet.start_pool()
            pin_fleet(fleet, args.pool_cpu)
            results.append(await run_level(fleet, n, args))
            report(results[-1], args)
    r = results[-1]
    kib = (r["rss_held"] - r["rss_fresh"]) / r["n"]
    rs = r["restart"]
    print(
        f"restart: {r['n']} leases recovered and serving {rs['first_exec']:.2f} s after a SIGKILL "
        f"(answering {rs['answering']:.2f} s, every node reconciled {rs['ready']:.2f} s)"
    )
    print(
        f"scale: {r['n']} leases, pool overhead p50 {pct(r['overhead'], 0.5):.1f} ms "
        f"p99 {pct(r['overhead'], 0.99):.1f} ms, allocate burst p50 {pct(r['alloc_burst'], 0.5):.1f} ms, "
        f"rss per lease {kib:.2f} KiB"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--leases", type=int, nargs="+", default=[1000, 5000, 20000])
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument(
        "--rate", type=float, default=300.0, help="aggregate execs per second (all leases together)"
    )
    p.add_argument("--burst", type=int, default=1000, help="allocates, closes and execs in flight at once")
    p.add_argument(
        "--sample", type=int, default=5000, help="leases whose exec latency is measured routed and direct"
    )
    p.add_argument(
        "--no-exec-all-after-restart",
        dest="exec_all_after_restart",
        action="store_false",
        help="after the restart, exec on the sample only (every lease is still heartbeated)",
    )
    p.add_argument("--threads", type=int, default=4, help="WSGI threads per simulated exec server")
    p.add_argument(
        "--node-processes",
        type=int,
        default=None,
        help="helper processes the simulated nodes are split over (default: one per 25 nodes; a helper's "
        "loop polls all its sockets each turn, so its CPU per request grows with the nodes it serves)",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="keep warm pools on (the pool's implicit warm target and the nodes' burst refill); off by "
        "default: with no create latency they only add the simulated nodes' churn to the machine's load",
    )
    p.add_argument("--latency-ms", default="0", help="fake create,exec,destroy latency of the memory backend")
    p.add_argument(
        "--pool-cpu",
        type=int,
        default=None,
        help="pin the pool to this core and the bench and simulated nodes to the others",
    )
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
