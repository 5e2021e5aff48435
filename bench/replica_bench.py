"""Pool replicas at scale: two pool processes on one PostgreSQL lease record, one SIGKILLed mid-run.

Runs `--nodes` simulated exec servers (swe_rl/fleet/fakes/simulated_fleet.py: the real exec server app
over the in-memory backend, commands not run; `--node-threads` WSGI threads each, in `--node-processes`
processes), a real PostgreSQL (Debian's server in a temporary
directory: swe_rl/testing/local_postgres.py) and two real pool processes sharing it
(`SWE_POOL_DATABASE_URL`). The load comes from `--client-processes` processes, each with its share of
the EnvClients (every client holds both URLs, half of them A first, half B first). Then:
- allocate: `--leases` leases held at once (`--burst` allocates in flight over all processes), then
  each lease's first exec, untimed (an episode's first command follows its allocate; the node checks a
  credential's signature on its first call only, so this is the steady state of held leases;
  `--cold-credentials` leaves those first calls to the timed phase);
- exec: for `--seconds`, execs on random leases offered at `--rate` a second in all, an open loop: each
  call starts at its due time whether or not earlier ones have answered (a process with more than
  `--max-in-flight` calls unanswered sheds the next ones, counted), so a slow answer never delays the
  next call and the load generator's queue is not a latency; direct calls by default (to the lease's
  node with its credential), `--routed` through the replicas; the commands are idempotent (`echo`),
  so the client may send one again after a cut connection;
- halfway through, replica A gets SIGKILL; the run goes on through B;
- after: every lease is heartbeated through B (a lease it does not know or whose container is gone is
  lost) and closed (`--close`); B ends with no lease.

CPUs: the head (the pool replicas and the PostgreSQL they share) gets `--pool-cpu` (default 0); the
simulation (this process, the client processes, the simulated nodes) is pinned to the other CPUs
(every thread: `_common.pin`, what `taskset -a -p` does), printed in the header. `--no-pin` leaves the
scheduler alone. The simulation runs one node process and one client process per CPU it has by default:
on one CPU more processes only add switches (every call crosses from a client process to a node's and
back) and thin each loop's turns.

Figures (the last line): execs/s answered over the exec phase; head CPU per exec (CPU seconds of both
pool processes over the exec phase, A's until its kill, divided by the execs made; the line before it
adds their PostgreSQL's); the overhead per
call, p50 and p99 over every exec answered, paired per call: the client's time for that call on its own
connection (from writing the request to reading the whole answer for a direct call; to the answer's
head for a routed one) minus the node's own time for the same call (its `x-swe-node-seconds`, from its
reading the request to its answer, its thread queue included; the pool passes it through on a routed
answer). So it is what the head and the network add to a call, plus the client process's own event loop
lag; never the offered load's queue (open loop) nor a difference of two independent tails. For routed
calls the pool's own part (`x-swe-pool-own-seconds`) is printed beside it. Lost leases and failed
calls (an exec that raised after the client's retries) end the line. The CPU seconds of each group of
processes over the exec phase are printed too (where the time goes).

    python bench/replica_bench.py [--leases 50000] [--nodes 100] [--rate 1000] [--seconds 60] [--routed]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import multiprocessing as mp
import os
import random
import time
from multiprocessing.connection import Connection
from typing import Any

import httpx
from _common import cpu_s, descendants, gated, load_average, pct, pin

from swe_rl.fleet.call_headers import NODE_SECONDS_HEADER, POOL_OWN_HEADER
from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet
from swe_rl.fleet.pool.node_wire import NodeAnswer
from swe_rl.testing.local_postgres import LocalPostgres

IMAGES = [f"swe-rl/replica-bench-{i}:latest" for i in range(8)]
LEASES_PER_CLIENT = 1000  # one EnvClient (a rollout worker's) per 1,000 leases


def worker(share: dict[str, Any], conn: Connection) -> None:
    """One client process: allocate its share, wait for the start, run its open loop, heartbeat, report."""
    asyncio.run(_worker(share, conn))


def _clients(share: dict[str, Any], overheads: list[float], own: list[float]) -> list[EnvClient]:
    async def stamped(request: httpx.Request) -> None:
        request.extensions["bench_sent"] = time.monotonic()

    async def routed(response: httpx.Response) -> None:  # the client's time minus the node's, same call
        node, began = response.headers.get(NODE_SECONDS_HEADER), response.request.extensions.get("bench_sent")
        if node is not None and began is not None and response.request.url.path == "/exec":
            overheads.append(time.monotonic() - began - float(node))
            if (value := response.headers.get(POOL_OWN_HEADER)) is not None:
                own.append(float(value))

    def direct(op: str, seconds: float, answer: NodeAnswer) -> None:
        if op == "exec" and answer.node_seconds is not None:
            overheads.append(seconds - answer.node_seconds)

    a, b = share["urls"]
    clients = []
    for i in range(share["clients"]):
        cfg = EnvClientConfig(
            pool_url=f"{a},{b}" if (share["first_client"] + i) % 2 == 0 else f"{b},{a}",
            token=share["token"],
            read_timeout=600,
            connect_timeout=120,  # a loaded machine can take seconds to accept a connection
            allocate_deadline=1800,
            heartbeat_interval=60,
            restart_grace=60,
            direct=share["direct"],
        )
        client = EnvClient(cfg)
        client._http.event_hooks["request"].append(stamped)
        client._http.event_hooks["response"].append(routed)
        client._node_wires.observe = direct
        clients.append(client)
    return clients


async def _worker(share: dict[str, Any], conn: Connection) -> None:
    overheads: list[float] = []
    own: list[float] = []
    clients = _clients(share, overheads, own)
    first = share["first_lease"]
    t0 = time.monotonic()
    leases: list[Lease] = await gated(
        share["leases"],
        share["burst"],
        lambda i: clients[i % len(clients)].allocate(
            IMAGES[(first + i) % len(IMAGES)], instance_id=f"rb-{first + i}"
        ),
    )
    allocated = time.monotonic() - t0
    t1 = time.monotonic()
    if share["first_calls"]:  # each lease's first command, as an episode's follows its allocate (untimed)
        await gated(len(leases), share["burst"], lambda i: leases[i].exec("echo first", idempotent=True))
    conn.send(("allocated", (allocated, time.monotonic() - t1)))
    # This process holds thousands of leases (a rollout worker holds a few): a full collection over
    # them would pause its loop for 100s of ms, a lag of the load generator, not of the fleet.
    gc.freeze()
    start, seconds = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    overheads.clear()
    own.clear()
    done = failed = shed = 0
    errors: dict[str, int] = {}
    lags: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def one(lease: Lease) -> None:
        nonlocal done, failed
        try:
            result = await lease.exec("echo replica-bench", idempotent=True)
            assert result.output.strip() == "replica-bench"
            done += 1
        except Exception as exc:  # noqa: BLE001 - counted: a call the retries could not save
            failed += 1
            key = type(exc).__name__ + ": " + str(exc)[:120]
            errors[key] = errors.get(key, 0) + 1

    rate, end, started = share["rate"], start + seconds, 0
    await asyncio.sleep(max(0.0, start - time.time()))
    while (now := time.time()) < end:
        due = int((now - start) * rate) + 1  # call k is due at start + k/rate: every one starts, late or not
        while started < due:
            lags.append(now - (start + started / rate))
            started += 1
            if len(tasks) >= share["max_in_flight"]:
                shed += 1
                continue
            task = asyncio.create_task(one(random.choice(leases)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.sleep(min(0.002, max(0.0, start + started / rate - time.time())))  # to the next one
    await asyncio.gather(*tasks)
    conn.send(("execs", {"done": done, "failed": failed, "shed": shed, "errors": errors, "lags": lags,
                         "overheads": overheads, "own": own}))  # fmt: skip
    by_client: dict[int, list[Lease]] = {}
    for lease in leases:
        by_client.setdefault(id(lease.client), []).append(lease)
    known = sum(await asyncio.gather(*(client_beat(c, by_client.get(id(c), [])) for c in clients)))
    if share["close"]:
        await gated(len(leases), share["burst"], lambda i: leases[i].close())
    for client in clients:
        await client.aclose()
    conn.send(("final", known))


async def client_beat(client: EnvClient, leases: list[Lease]) -> int:
    """Heartbeat the client's leases through whichever replica it talks to now; how many are known."""
    for lease in leases:
        client._watched[lease.lease_id] = lease
    return await client.heartbeat_all()


def receive_all(conns: list[Connection], kind: str) -> list[Any]:
    out = []
    for conn in conns:
        got, value = conn.recv()
        assert got == kind, (got, kind)
        out.append(value)
    return out


def run(
    args: argparse.Namespace, fleet: MemoryFleet, pg: LocalPostgres, a: str, pools: dict[str, int]
) -> None:
    b = fleet.pool_url
    n_proc = max(1, args.client_processes)
    n_clients = max(2, math.ceil(args.leases / LEASES_PER_CLIENT))
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for k in range(n_proc):
        lo, hi = args.leases * k // n_proc, args.leases * (k + 1) // n_proc
        c_lo, c_hi = n_clients * k // n_proc, n_clients * (k + 1) // n_proc
        share = {"urls": (a, b), "token": fleet.token, "first_lease": lo, "leases": hi - lo, "first_client": c_lo,
                 "clients": max(1, c_hi - c_lo), "burst": max(1, args.burst // n_proc), "rate": args.rate / n_proc,
                 "max_in_flight": args.max_in_flight, "direct": not args.routed, "close": args.close,
                 "first_calls": not args.cold_credentials}  # fmt: skip
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(share, child), daemon=True)
        proc.start()
        conns.append(parent)
        procs.append(proc)
    try:
        allocated = receive_all(conns, "allocated")
        print(
            f"allocated {args.leases} leases in {max(a for a, _ in allocated):.1f} s ({load_average()})",
            flush=True,
        )
        if not args.cold_credentials:
            print(f"each lease's first exec (untimed) in {max(f for _, f in allocated):.1f} s", flush=True)
        groups = {
            "pools": lambda: [pools["A"], pools["B"]],
            "clients": lambda: [p.pid for p in procs if p.pid],
            "nodes": lambda: [h.pid for h in fleet.helpers],
            "postgres": lambda: postgres_pids(pg),
        }
        cpu0 = {name: group_cpu(name, pids()) for name, pids in groups.items()}
        start = time.time() + 1.0
        for conn in conns:
            conn.send((start, args.seconds))
        time.sleep(max(0.0, start + args.seconds / 2 - time.time()))
        a_cpu = cpu_s(pools["A"])  # halfway: SIGKILL, as a crash (nothing of its shutdown runs)
        cpu0["pools"] -= a_cpu  # A's CPU counts up to its kill (its pid is gone after)
        fleet.kill_replica(a)
        print(f"replica A killed {time.time() - start:.1f} s into the exec phase", flush=True)
        execs = receive_all(conns, "execs")
        elapsed = time.time() - start
        used = {name: group_cpu(name, pids()) - cpu0[name] for name, pids in groups.items()}
        known = sum(receive_all(conns, "final"))
    finally:
        for proc in procs:
            proc.join(600)
            if proc.is_alive():
                proc.kill()
    status = httpx.get(b + "/status?limit=1", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=600)
    merged: dict[str, Any] = {
        "done": 0,
        "failed": 0,
        "shed": 0,
        "errors": {},
        "lags": [],
        "overheads": [],
        "own": [],
    }
    for part in execs:
        for key in ("done", "failed", "shed"):
            merged[key] += part[key]
        for key in ("lags", "overheads", "own"):
            merged[key] += part[key]
        for error, count in part["errors"].items():
            merged["errors"][error] = merged["errors"].get(error, 0) + count
    report(args, merged, elapsed, used, args.leases - known, status.json()["totals"]["leases"])


def postgres_pids(pg: LocalPostgres) -> list[int]:
    """The PostgreSQL server and the processes it started (its backends come and go)."""
    return [pg.proc.pid, *descendants(pg.proc.pid)] if pg.proc else []


def group_cpu(name: str, pids: list[int]) -> float:
    """CPU seconds of a group's processes; PostgreSQL's with its exited backends (`cpu_s(reaped=True)`)."""
    return sum(cpu_s(pid, reaped=name == "postgres") for pid in pids)


def report(
    args: argparse.Namespace, r: dict[str, Any], elapsed: float, used: dict[str, float], lost: int, on_b: int
) -> None:
    calls = r["done"] + r["failed"]
    print(f"execs: {r['done']} ok, {r['failed']} failed, {r['shed']} shed (over {args.max_in_flight} in flight "
          f"in a client process) in {elapsed:.1f} s; leases B holds after the heartbeats: {on_b}")  # fmt: skip
    for error, count in sorted(r["errors"].items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {count} x {error}")
    print(f"start lag of the open loop (due to started): p50 {pct(r['lags'], 0.5):.1f} ms "
          f"p99 {pct(r['lags'], 0.99):.1f} ms")  # fmt: skip
    if r["own"]:
        print(
            f"the pool's own part of a routed call: p50 {pct(r['own'], 0.5):.2f} ms p99 {pct(r['own'], 0.99):.2f} ms"
        )
    print("CPU seconds over the exec phase: " + ", ".join(f"{k} {v:.1f}" for k, v in used.items()))
    rate = r["done"] / elapsed if elapsed else 0.0
    cpu_ms = 1000 * used["pools"] / calls if calls else float("nan")
    with_db = 1000 * (used["pools"] + used["postgres"]) / calls if calls else float("nan")
    print(f"head CPU per exec: the pool replicas {cpu_ms:.2f} ms, with their PostgreSQL {with_db:.2f} ms")
    print(load_average(), flush=True)
    print(
        f"scale: {args.leases} leases, {args.nodes} nodes, {rate:.0f} execs/s, head CPU per exec {cpu_ms:.2f} ms, "
        f"overhead p50 {pct(r['overheads'], 0.5):.1f} ms p99 {pct(r['overheads'], 0.99):.1f} ms, "
        f"replica kill: lost {lost}, failed {r['failed']}",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--leases", type=int, default=50_000)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--node-processes", type=int, default=None,
                   help="processes serving the simulated nodes (default: one per CPU they run on)")  # fmt: skip
    p.add_argument("--node-threads", type=int, default=2, help="WSGI threads per simulated node")
    p.add_argument("--client-processes", type=int, default=None,
                   help="processes of the load generator (default: one per CPU it runs on)")  # fmt: skip
    p.add_argument("--rate", type=float, default=1000.0, help="execs a second offered (open loop)")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the exec phase")
    p.add_argument("--burst", type=int, default=400, help="allocates in flight at most (over all processes)")
    p.add_argument("--max-in-flight", type=int, default=250, help="unanswered execs per client process")
    p.add_argument("--close", action="store_true", help="close every lease at the end (minutes at 50,000)")
    p.add_argument("--cold-credentials", action="store_true",
                   help="no first exec per lease before the timed phase: most timed calls are a lease's first")  # fmt: skip
    p.add_argument("--routed", action="store_true", help="execs through the pool replicas, not to the nodes")
    p.add_argument(
        "--pool-cpu", type=int, default=0, help="the head's CPU: the pool replicas and their PostgreSQL"
    )
    p.add_argument("--no-pin", action="store_true", help="leave every process to the scheduler")
    p.add_argument("--threaded-nodes", action="store_true",
                   help="the simulated nodes on waitress's loop and worker threads, not inline_loop.py")  # fmt: skip
    args = p.parse_args()
    cpus = os.sched_getaffinity(0)
    others = cpus - {args.pool_cpu}
    pinned = not args.no_pin and args.pool_cpu in cpus and bool(others)
    if pinned:
        pin(os.getpid(), others)  # everything started from here on inherits the other CPUs
    simulation_cpus = len(others) if pinned else len(cpus)
    # More processes than CPUs add only switches: each call crosses from a client process to a node's and
    # back, and a busier loop serves more calls per turn (measured: docs/fleet.md, "Session 31").
    args.node_processes = args.node_processes or simulation_cpus
    args.client_processes = args.client_processes or simulation_cpus
    mode = "routed through the replicas" if args.routed else "direct to the nodes"
    where = (
        f"pool replicas and PostgreSQL on CPU {args.pool_cpu}; clients and simulated nodes on CPU {sorted(others)}"
        if pinned
        else "no CPU pinning"
    )
    print(f"replica bench: {args.leases} leases, {args.nodes} nodes, {args.rate:g} execs/s offered for "
          f"{args.seconds:g} s, {mode}, {args.client_processes} client and {args.node_processes} node processes; "
          f"{where}; {load_average()}",
          flush=True)  # fmt: skip
    cap = math.ceil(args.leases / args.nodes * 1.2)
    with (
        LocalPostgres(database="replica_bench") as pg,
        MemoryFleet(
            nodes=args.nodes,
            max_per_node=cap,
            node_processes=args.node_processes,
            threads=args.node_threads,
            inline=not args.threaded_nodes,
            images=IMAGES,
            pool_env={
                "SWE_POOL_DATABASE_URL": pg.url,
                "SWE_POOL_LEASE_TTL": "3600",
                "SWE_POOL_SYNC_INTERVAL": "1",
                "SWE_POOL_HEALTH_INTERVAL": "5",
                "SWE_POOL_WARM_MIN": "0",
            },
        ) as fleet,
    ):
        a = fleet.start_replica()
        assert fleet.pool is not None
        pools = {"A": next(proc.pid for url, proc in fleet.replicas if url == a), "B": fleet.pool.pid}
        if pinned:  # the head: the replicas and the database they share (its new backends inherit)
            for pid in [*pools.values(), *postgres_pids(pg)]:
                pin(pid, {args.pool_cpu})
        run(args, fleet, pg, a, pools)


if __name__ == "__main__":
    main()
