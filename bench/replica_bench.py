"""Pool replicas at scale: two pool processes on one PostgreSQL lease record, one SIGKILLed mid-run.

Runs `--nodes` simulated exec servers (swe_rl/fleet/fakes/simulated_fleet.py: the real exec server app
over the in-memory backend, commands not run), a real PostgreSQL (Debian's server in a temporary
directory: swe_rl/testing/local_postgres.py) and two real pool processes sharing it
(`SWE_POOL_DATABASE_URL`). Every client holds both URLs (half of them A first, half B first), so the
allocates and calls are spread over both replicas. Then:
- allocate: `--leases` leases held at once (`--burst` allocates in flight);
- exec: for `--seconds`, execs on random leases at up to `--rate` a second (`--burst` in flight at
  most), each one through the client (retried on the other replica when its connection fails); the
  commands are idempotent (`echo`), so the client may send one again after a cut connection;
- halfway through, replica A gets SIGKILL; the run goes on through B;
- after: every lease is heartbeated through B (a lease it does not know or whose container is gone is
  lost) and closed; B ends with no lease.
Figures: execs/s achieved (the 2-core machine runs the bench's clients, both pools, the simulated nodes
and PostgreSQL: the rate is what this machine reached, not the pool's ceiling); head CPU per exec (CPU
seconds of both pool processes over the exec phase, divided by the execs in it); the pool's own time per
call (`x-swe-pool-overhead-seconds`: its handling minus the node's reported time), p50 and p99 over every
exec answered; lost leases and failed calls (an exec that raised after the client's retries).
With `--direct` the execs go straight to the lease's node with its credential (the pool off their
path, as clients do by default); the overhead is then the call's time outside the node as the client
sees it (its answer's arrival minus its sending, minus the node's `x-swe-node-seconds`), which also
counts the bench's own event loop: an upper bound of what the head adds, which is nothing.

    python bench/replica_bench.py [--leases 50000] [--nodes 100] [--rate 1000] [--seconds 60] [--direct]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from swe_rl.fleet.call_headers import NODE_SECONDS_HEADER, POOL_OVERHEAD_HEADER
from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet
from swe_rl.testing.local_postgres import LocalPostgres

IMAGES = [f"swe-rl/replica-bench-{i}:latest" for i in range(8)]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000 if s else float("nan")


def cpu_s(pid: int) -> float:
    try:
        fields = open(f"/proc/{pid}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def gated(n: int, limit: int, fn: Callable[[int], Awaitable[Any]]) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(i: int) -> Any:
        async with gate:
            return await fn(i)

    return await asyncio.gather(*(one(i) for i in range(n)))


def make_clients(
    fleet: MemoryFleet, a: str, b: str, n: int, overheads: list[float], direct: bool = False
) -> list[EnvClient]:
    async def record(response: httpx.Response) -> None:
        value = response.headers.get(POOL_OVERHEAD_HEADER)
        if value is not None and response.request.url.path == "/exec":
            overheads.append(float(value))

    async def sent(request: httpx.Request) -> None:
        request.extensions["bench_sent"] = time.monotonic()

    async def answered(response: httpx.Response) -> None:  # a direct call: its time outside the node
        node = response.headers.get(NODE_SECONDS_HEADER)
        began = response.request.extensions.get("bench_sent")
        if node is not None and began is not None and response.request.url.path.endswith("/container/exec"):
            overheads.append(max(0.0, time.monotonic() - began - float(node)))

    clients = []
    for i in range(n):
        urls = f"{a},{b}" if i % 2 == 0 else f"{b},{a}"
        cfg = EnvClientConfig(
            pool_url=urls,
            token=fleet.token,
            read_timeout=600,
            connect_timeout=120,  # a loaded machine can take seconds to accept a connection
            allocate_deadline=900,
            heartbeat_interval=60,
            restart_grace=60,
            direct=direct,
        )
        client = EnvClient(cfg)
        client._http.event_hooks["response"].append(record)
        if direct:
            client._node_http.event_hooks["request"].append(sent)
            client._node_http.event_hooks["response"].append(answered)
        clients.append(client)
    return clients


async def run(args: argparse.Namespace, fleet: MemoryFleet, a: str, b: str, a_pid: int) -> dict[str, Any]:
    assert fleet.pool is not None
    b_pid = fleet.pool.pid
    overheads: list[float] = []
    clients = make_clients(fleet, a, b, max(2, args.leases // 1000), overheads, direct=args.direct)
    t0 = time.monotonic()
    leases: list[Lease] = await gated(
        args.leases,
        args.burst,
        lambda i: clients[i % len(clients)].allocate(IMAGES[i % len(IMAGES)], instance_id=f"rb-{i}"),
    )
    allocate_s = time.monotonic() - t0
    print(f"allocated {len(leases)} leases in {allocate_s:.1f} s", flush=True)
    overheads.clear()

    done = failed = 0
    errors: dict[str, int] = {}
    gate = asyncio.Semaphore(args.burst)
    killed_at: float | None = None
    cpu0 = cpu_s(a_pid) + cpu_s(b_pid)
    a_cpu_at_kill = 0.0
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
        finally:
            gate.release()

    async def kill_a() -> None:  # halfway: SIGKILL, as a crash (nothing of its shutdown runs)
        nonlocal killed_at, a_cpu_at_kill
        await asyncio.sleep(args.seconds / 2)
        a_cpu_at_kill = cpu_s(a_pid)
        fleet.kill_replica(a)
        killed_at = time.monotonic()
        print(
            f"replica A killed after {killed_at - start:.1f} s ({done} execs done, {failed} failed)",
            flush=True,
        )

    start = time.monotonic()
    end = start + args.seconds
    killer = asyncio.create_task(kill_a())
    sent = 0
    while (now := time.monotonic()) < end:
        due = int((now - start) * args.rate)
        sent = max(sent, due - args.burst)  # calls the machine could not start in time are not made up later
        while sent < due and not gate.locked():  # open loop: at most `burst` in flight
            await gate.acquire()
            task = asyncio.create_task(one(random.choice(leases)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        await asyncio.sleep(0.005)
    await killer
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - start
    head_cpu = a_cpu_at_kill + cpu_s(b_pid) - cpu0

    by_client: dict[int, list[Lease]] = {}
    for lease in leases:
        by_client.setdefault(id(lease.client), []).append(lease)
    beats = await asyncio.gather(*(client_beat(c, by_client.get(id(c), [])) for c in clients))
    lost = args.leases - sum(beats)
    status = httpx.get(b + "/status?limit=1", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=600)
    held_on_b = status.json()["totals"]["leases"]
    report(args, {"done": done, "failed": failed, "errors": errors, "elapsed": elapsed, "head_cpu": head_cpu,
                  "overheads": overheads, "lost": lost, "held_on_b": held_on_b})  # fmt: skip
    if args.close:
        await gated(len(leases), args.burst, lambda i: leases[i].close())
        status = httpx.get(
            b + "/status?limit=1", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=600
        )
        print(f"after closing every lease through the clients, B holds {status.json()['totals']['leases']}")
    for client in clients:
        await client.aclose()
    return {
        "allocate_s": allocate_s,
        "done": done,
        "failed": failed,
        "errors": errors,
        "elapsed": elapsed,
        "head_cpu": head_cpu,
        "overheads": overheads,
        "lost": lost,
        "held_on_b": held_on_b,
    }


async def client_beat(client: EnvClient, leases: list[Lease]) -> int:
    """Heartbeat the client's leases through whichever replica it talks to now; how many are known."""
    for lease in leases:
        client._watched[lease.lease_id] = lease
    return await client.heartbeat_all()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--leases", type=int, default=50_000)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--node-processes", type=int, default=4)
    p.add_argument("--rate", type=float, default=1000.0, help="execs a second to aim at")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the exec phase")
    p.add_argument("--burst", type=int, default=400, help="calls in flight at most")
    p.add_argument("--close", action="store_true", help="close every lease at the end (minutes at 50,000)")
    p.add_argument("--direct", action="store_true", help="execs straight to the nodes (lease credentials)")
    args = p.parse_args()
    cap = math.ceil(args.leases / args.nodes * 1.2)
    with (
        LocalPostgres(database="replica_bench") as pg,
        MemoryFleet(
            nodes=args.nodes,
            max_per_node=cap,
            node_processes=args.node_processes,
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
        a_pid = next(proc.pid for url, proc in fleet.replicas if url == a)
        asyncio.run(run(args, fleet, a, fleet.pool_url, a_pid))


def report(args: argparse.Namespace, r: dict[str, Any]) -> None:
    calls = r["done"] + r["failed"]
    print(f"execs: {r['done']} ok, {r['failed']} failed in {r['elapsed']:.1f} s; leases B knows after the kill "
          f"and the heartbeats: {r['held_on_b']}")  # fmt: skip
    for error, count in sorted(r["errors"].items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {count} x {error}")
    rate = r["done"] / r["elapsed"] if r["elapsed"] else 0.0
    cpu_ms = 1000 * r["head_cpu"] / calls if calls else float("nan")
    print(
        f"scale: {args.leases} leases, {args.nodes} nodes, {rate:.0f} execs/s, head CPU per exec {cpu_ms:.2f} ms, "
        f"overhead p50 {pct(r['overheads'], 0.5):.1f} ms p99 {pct(r['overheads'], 0.99):.1f} ms, "
        f"replica kill: lost {r['lost']}, failed {r['failed']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
