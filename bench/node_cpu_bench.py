"""CPU of the exec server per direct exec, on one simulated-node process alone (issue 50 item 6's nodes).

Starts one helper process of swe_rl/fleet/fakes/simulated_fleet.py (`--nodes` real exec server apps on
the in-memory backend, one waitress loop), trusts a fresh pool key on every node, makes `--containers`
leased containers per node with a credential each (signed here, as the pool signs them), then sends
direct execs (the credential, no token) over the client's own wire (`NodeWire`), `--in-flight` at a
time, `--calls` per round for `--rounds` rounds. Printed: the helper's CPU seconds per exec in each
round and their median, the rate, and this process's CPU per exec (the load generator). With `--cpu N`
both processes are pinned to CPU N, so neither borrows another core; `--idle-connections` opens that
many connections to the nodes and leaves them idle (waitress's loop visits every connection each turn).

Why a bench of its own: replica_bench.py's node figure mixes the nodes' per-exec cost with their loop
over every client connection and with the rest of the machine; this one isolates the exec path, to
measure a change to it (docs/fleet.md, "The bench": 0.64 ms before the credential cache and the one
write per answer, 0.47 after, with the defaults and `--cpu 1`).

    python bench/node_cpu_bench.py [--nodes 25] [--containers 100] [--calls 3000] [--rounds 5] [--cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import time

import httpx
from _common import cpu_s, load_average, pin
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swe_rl.fleet.lease_credential import LEASE_SCHEME, LeaseSigner
from swe_rl.fleet.pool.credentials import LEASE_OPS
from swe_rl.fleet.pool.node_wire import NodeWire

IMAGE = "swe-rl/node-cpu-bench:latest"
Lease = tuple[str, str, str]
"""(node URL, container id, Authorization value)."""


async def leases(urls: list[str], token: str, per_node: int) -> list[Lease]:
    """A fresh pool key trusted by every node, and per_node leased containers on each with a credential."""
    signer = LeaseSigner(Ed25519PrivateKey.generate())
    made: list[Lease] = []
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:

        async def create(url: str) -> Lease:
            lease = f"bench-{secrets.token_hex(6)}"
            resp = await http.post(url + "/container/create", json={"image": IMAGE, "lease_id": lease})
            resp.raise_for_status()
            container = resp.json()["container_id"]
            credential, _ = signer.issue(lease, url, container, LEASE_OPS, 3600)
            return url, container, LEASE_SCHEME + credential

        for url in urls:
            (await http.post(url + "/lease-keys", json={"keys": [signer.public]})).raise_for_status()
            made += await asyncio.gather(*(create(url) for _ in range(per_node)))
    return made


async def measure(args: argparse.Namespace, urls: list[str], helper: int, token: str) -> None:
    made = await leases(urls, token, args.containers)
    wires = {url: NodeWire(url, None, ssl_context=None, connect_timeout=30) for url in urls}
    idle = []
    for i in range(args.idle_connections):
        host, port = urls[i % len(urls)].rsplit(":", 1)
        idle.append(await asyncio.open_connection(host.removeprefix("http://"), int(port)))
    gate = asyncio.Semaphore(args.in_flight)

    async def one() -> None:
        url, container, authorization = random.choice(made)
        body = {"command": "echo bench", "container_id": container}
        async with gate:
            resp = await wires[url].post("/container/exec", body, 60, authorization=authorization)
        if resp.status_code != 200:
            raise RuntimeError(f"exec answered {resp.status_code}: {resp.text[:200]}")

    await asyncio.gather(*(one() for _ in range(min(500, args.calls))))  # warm: connections, caches
    rounds = []
    for _ in range(args.rounds):
        node0, own0, t0 = cpu_s(helper), cpu_s(os.getpid()), time.monotonic()
        await asyncio.gather(*(one() for _ in range(args.calls)))
        elapsed = time.monotonic() - t0
        node, own = cpu_s(helper) - node0, cpu_s(os.getpid()) - own0
        rounds.append((1000 * node / args.calls, args.calls / elapsed, 1000 * own / args.calls))
    for _, writer in idle:
        writer.close()
    for wire in wires.values():
        wire.close()
    node_ms = [r[0] for r in rounds]
    mid = sorted(rounds)[len(rounds) // 2]
    print("node CPU per exec by round: " + " ".join(f"{ms:.3f}" for ms in node_ms) + " ms", flush=True)
    loop = " (inline)" if args.inline else ""
    print(
        f"node_cpu{loop}: {args.nodes} nodes, {args.containers} containers each, {args.in_flight} in flight, "
        f"{args.idle_connections} idle connections: node CPU per exec median {statistics.median(node_ms):.3f} ms "
        f"({mid[1]:.0f} execs/s), load generator {mid[2]:.3f} ms ({load_average()})",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=int, default=25, help="simulated nodes in the one process")
    p.add_argument("--containers", type=int, default=100, help="leased containers per node")
    p.add_argument("--node-threads", type=int, default=2, help="WSGI threads per node")
    p.add_argument("--calls", type=int, default=3000, help="direct execs per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--in-flight", type=int, default=32)
    p.add_argument("--idle-connections", type=int, default=0)
    p.add_argument("--cpu", type=int, default=None, help="pin this process and the nodes' to this CPU")
    p.add_argument(
        "--inline", action="store_true", help="the helper serves on its loop's thread (inline_loop.py)"
    )
    args = p.parse_args()
    if args.cpu is not None:
        pin(os.getpid(), {args.cpu})  # the helper started below inherits it
    token = secrets.token_hex(16)
    helper = subprocess.Popen(
        [sys.executable, "-m", "swe_rl.fleet.fakes.simulated_fleet", "--nodes", str(args.nodes),
         "--max-containers", str(2 * args.containers), "--threads", str(args.node_threads), "--images", IMAGE,
         *(["--inline"] if args.inline else [])],
        env={**os.environ, "SWE_EXEC_TOKEN": token, "SWE_LOG_LEVEL": "ERROR"},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert helper.stdout is not None
        started = json.loads(helper.stdout.readline())
        asyncio.run(measure(args, started["urls"], started["pid"], token))
    finally:
        helper.terminate()
        helper.wait(60)


if __name__ == "__main__":
    main()
