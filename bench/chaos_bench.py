"""Faults survived, nothing lost: real faults under a batch of real episodes and gradings.

For each fault a fresh `swe_rl.fleet.fakes.faults.ChaosFleet` (two exec servers behind fault proxies, one
pool) runs a batch of episodes through the real client, pool and agent loop on a bundled fixture: gold
episodes (must end ``resolved``) and a noop one (must not). Every episode's first command holds in its
container (it writes a mark, then waits for a go file) so that the fault lands while every episode has a
call in flight; then the episodes are released, the fault is lifted and the fleet is probed until an
allocate + exec works again (the recovery time). Faults:

- ``grading_kill``: the grading container of every gold episode is ``docker kill``-ed mid test run;
- ``exec_kill``: node 0's exec server SIGKILLed with its containers alive, then restarted (same id);
- ``pool_kill``: the pool SIGKILLed mid-burst, then restarted on its lease database;
- ``node_cut``: node 0 cut off from the pool (its proxy drops every connection), then healed;
- ``slow_node``: every answer of node 0 held 0.2 s per chunk for the rest of the batch;
- ``daemon_restart``: node 0 runs on a private ``dockerd`` (own data root, exec root, socket; no bridge,
  no iptables), SIGKILLed with its containerd and started again;
- ``disk_full``: node 0's private daemon has its data root on a 600 MiB tmpfs, filled to the last byte
  after every episode's first command and before its submit (freed once the batch is over).

Invariants, after every fault: an episode is resolved / unresolved / no_patch only if its grading ran,
else ``env_error`` with a reason (counted per fault); no episode raises or hangs (lost silently); no
container of the fleet is left and the pool holds no lease once the batch is over (its record and the
nodes agree). Last line:

    chaos: F faults over E episodes, wrongly scored 0, lost silently 0, leaked containers 0, recovered R s p50

Exit status 1 when any figure but R is not 0. ``python bench/chaos_bench.py [--faults a,b] [--episodes 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import httpx

from swe_rl.agent import run_instance
from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.errors import FleetError
from swe_rl.fleet.fakes.faults import ChaosFleet, KillingClient, PrivateDockerd
from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader
from swe_rl.harnesses import BashBlockHarness
from swe_rl.metrics.env_errors import env_error_kind
from swe_rl.policies.gold import GOLD_PATCH_PATH
from swe_rl.policies.noop import SUBMIT_COMMAND, bash_turn
from swe_rl.tasks import TaskInstance, load_instances

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "data" / "fixtures" / "instances.jsonl"
INSTANCE = "pytoolz__toolz-9001"
FAULTS = ("grading_kill", "exec_kill", "pool_kill", "node_cut", "slow_node", "daemon_restart", "disk_full")
MARK, GO = "/tmp/.chaos-held", "/tmp/.chaos-go"
HOLD = f"touch {MARK}; while [ ! -e {GO} ]; do sleep 0.05; done"
LIFTED_AFTER_BATCH = ("slow_node", "disk_full")
DISK_SIZE = "600m"
"""The disk_full node's data root: the fixture image and a few containers fit, then it is filled."""
SLOW_NODE_DELAY = 0.2
"""Seconds every chunk of the slow node's answers is held."""
BOUND = 900.0
"""Seconds an episode may take before it counts as lost (a hang): far above a loaded machine's minutes."""
FAST_POOL = {  # the pool notices a dead or cut node within a few seconds
    "SWE_POOL_HEALTH_INTERVAL": "0.5",
    "SWE_POOL_NODE_DOWN_AFTER": "2",
    "SWE_POOL_REAP_INTERVAL": "0.5",
    "SWE_POOL_CONNECT_TIMEOUT": "2",
    "SWE_POOL_SHUTDOWN_GRACE": "3",
}


@dataclass
class SubmitGate:
    """Holds every episode before its submit turn until `go` (the disk is filled meanwhile)."""

    expected: int
    arrived: int = 0
    all_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_arrived.set()
        await self.go.wait()


class HeldPolicy:
    """Gold (apply the gold patch, submit) or noop (submit), whose first command holds in the container
    until the bench releases it; records its container so the bench can see the hold and release it.
    With a `gate`, its submit turn also waits for the bench."""

    def __init__(
        self,
        gold: bool,
        containers: list[str],
        ready: asyncio.Event,
        expected: int,
        gate: SubmitGate | None = None,
    ) -> None:
        self.gold, self.containers, self.ready, self.expected = gold, containers, ready, expected
        self.gate = gate

    async def start_episode(self, instance: TaskInstance, env: Any) -> None:
        if self.gold:
            await env.write_file(GOLD_PATCH_PATH, instance.patch)
        lease = getattr(env, "lease", None)
        self.containers.append(getattr(lease, "container_id", ""))
        if len(self.containers) >= self.expected:
            self.ready.set()

    async def act(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        if sum(1 for m in messages if m.get("role") == "assistant") == 0:
            then = f"git apply --verbose {GOLD_PATCH_PATH}" if self.gold else "true"
            return bash_turn(f"{HOLD}; {then}", "Waiting for the fault, then working.")
        if self.gate is not None:
            await self.gate.wait()
        return bash_turn(SUBMIT_COMMAND, "Submitting.")


@dataclass
class Round:
    fault: str
    episodes: int = 0
    statuses: Counter = field(default_factory=Counter)
    env_errors: list[str] = field(default_factory=list)
    wrongly_scored: list[str] = field(default_factory=list)
    lost_silently: list[str] = field(default_factory=list)
    leaked: int = 0
    pool_leases_left: int = 0
    recovered: float = 0.0

    def kinds(self) -> dict[str, int]:
        """env_error per fault kind, as the dashboard counts them."""
        return dict(sorted(Counter(env_error_kind(m) for m in self.env_errors).items()))

    def line(self) -> str:
        return (
            f"{self.fault}: {self.episodes} episodes {dict(self.statuses)}, env_error kinds {self.kinds()}, "
            "wrongly scored "
            f"{len(self.wrongly_scored)}, lost silently {len(self.lost_silently)}, leaked {self.leaked}, "
            f"pool leases left {self.pool_leases_left}, recovered {self.recovered:.1f} s"
        )


def fixture_instance(name: str = INSTANCE) -> TaskInstance:
    loaded = load_instances(FIXTURES)
    return next(i for i in loaded.instances if i.instance_id == name)


async def _exec_in(docker_client: Any, container_id: str, argv: list[str]) -> int | None:
    try:
        c = await asyncio.to_thread(docker_client.containers.get, container_id)
        return (await asyncio.to_thread(c.exec_run, argv)).exit_code
    except docker.errors.APIError:
        return None


async def _all_held(clients: list[Any], containers: list[str]) -> None:
    """Until every episode's first command is running (its mark exists), on whichever daemon has it."""
    waiting = set(containers)
    deadline = time.monotonic() + BOUND
    while waiting and time.monotonic() < deadline:
        for cid in list(waiting):
            for dc in clients:
                if await _exec_in(dc, cid, ["test", "-e", MARK]) == 0:
                    waiting.discard(cid)
                    break
        if waiting:
            await asyncio.sleep(0.1)


async def _release(clients: list[Any], containers: list[str]) -> None:
    for cid in containers:
        for dc in clients:
            await _exec_in(dc, cid, ["touch", GO])


async def _probe(client: EnvClient, instance: TaskInstance) -> float:
    """Seconds until an allocate + exec works (the fleet has recovered)."""
    started = time.monotonic()
    while time.monotonic() - started < BOUND:
        try:
            async with client.lease(instance.image, instance_id=instance.instance_id) as lease:
                if (await lease.exec("true", timeout=60)).returncode == 0:
                    return time.monotonic() - started
        except FleetError:  # the fleet is still down: ask again
            await asyncio.sleep(0.2)
    return float("inf")


async def _pool_status(fleet: ChaosFleet) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.get(
            fleet.pool_url + "/status", headers={"Authorization": f"Bearer {fleet.operator_token}"}
        )
        return dict(resp.json())


async def _node_down(fleet: ChaosFleet, i: int) -> None:
    """Until the pool has seen node i down (a bound, not a speed test)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            nodes = (await _pool_status(fleet))["nodes"]
            if not nodes[i]["healthy"]:
                return
        except (httpx.HTTPError, KeyError, IndexError):
            pass
        await asyncio.sleep(0.1)


async def run_round(
    fault: str, episodes: int = 4, instance: TaskInstance | None = None, server_prefix: str = "chaos"
) -> Round:
    """One batch of `episodes` (the last a noop, the others gold) with `fault` injected mid-batch;
    `server_prefix` starts the exec servers' ids (the test sessions' sweep finds theirs by it)."""
    instance = instance or fixture_instance()
    report = Round(fault, episodes)
    main = docker.from_env()
    tmp = tempfile.TemporaryDirectory(prefix="swe-rl-chaos-daemon-")
    daemon: PrivateDockerd | None = None
    try:
        node_env: list[dict[str, str]] = [{}, {}]
        daemon_clients = [main]
        if fault in ("daemon_restart", "disk_full"):
            daemon = PrivateDockerd(Path(tmp.name) / "d", DISK_SIZE if fault == "disk_full" else None)
            daemon.start()
            daemon.load(instance.image)
            node_env[0] = {"DOCKER_HOST": daemon.host}
            daemon_clients.append(docker.DockerClient(base_url=daemon.host))
        with ChaosFleet(2, pool_env=FAST_POOL, node_env=node_env, server_prefix=server_prefix) as fleet:
            config = EnvClientConfig(
                pool_url=fleet.pool_url, token=fleet.token, backoff=0.2, allocate_deadline=120
            )
            async with EnvClient(config) as client:
                report.recovered = await _batch(
                    fault, fleet, client, instance, report, daemon, daemon_clients
                )
                # the batch is over: every lease closed, every container gone (bounded: background removal)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    left = sum(len(fleet.containers(dc)) for dc in daemon_clients)
                    leases = [x for x in (await _pool_status(fleet))["leases"] if not x.get("lost")]
                    if not left and not leases:
                        break
                    await asyncio.sleep(0.2)
                report.leaked, report.pool_leases_left = left, len(leases)
        for dc in daemon_clients[1:]:
            dc.close()
    finally:
        if daemon is not None:
            daemon.stop()
        tmp.cleanup()
        main.close()
    return report


async def _batch(
    fault: str,
    fleet: ChaosFleet,
    client: EnvClient,
    instance: TaskInstance,
    report: Round,
    daemon: PrivateDockerd | None,
    daemon_clients: list[Any],
) -> float:
    containers: list[str] = []
    ready = asyncio.Event()
    n = report.episodes
    killing = KillingClient(client, daemon_clients[0], "evaluate") if fault == "grading_kill" else None
    gate = SubmitGate(n) if fault == "disk_full" else None

    async def one(i: int) -> tuple[bool, Any]:
        gold = i < n - 1
        policy = HeldPolicy(gold, containers, ready, n, gate)
        grader = FleetGrader(killing) if killing is not None and gold else None  # type: ignore[arg-type]
        try:
            result = await asyncio.wait_for(
                run_instance(instance, policy, BashBlockHarness(), client=client, grader=grader), BOUND
            )
        except Exception as exc:  # noqa: BLE001 (whatever escapes the loop: an episode lost without a verdict)
            return gold, exc
        return gold, result

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.wait_for(ready.wait(), BOUND)
    await _all_held(daemon_clients, containers)
    await _inject(fault, fleet, daemon, daemon_clients, containers)
    if gate is not None and daemon is not None:  # disk_full: every episode is about to submit
        done = asyncio.ensure_future(asyncio.gather(*tasks))
        await asyncio.wait(
            [done, asyncio.ensure_future(gate.all_arrived.wait())],
            timeout=BOUND,
            return_when="FIRST_COMPLETED",
        )
        await asyncio.to_thread(daemon.fill)
        gate.go.set()
    recovered = 0.0
    if fault not in LIFTED_AFTER_BATCH:
        recovered = await _probe(client, instance)
    outcomes = await asyncio.gather(*tasks)
    if fault == "slow_node":  # lifted once the batch is over
        fleet.proxies[0].delay = 0.0
    if fault == "disk_full" and daemon is not None:
        daemon.unfill()
    if fault in LIFTED_AFTER_BATCH:
        recovered = await _probe(client, instance)
    for i, (gold, out) in enumerate(outcomes):
        if isinstance(out, BaseException):
            report.lost_silently.append(f"episode {i}: {type(out).__name__}: {out}")
            continue
        status = out.grade.status
        report.statuses[status.value] += 1
        if status is GradeStatus.ENV_ERROR:
            if not out.grade.message:
                report.lost_silently.append(f"episode {i}: env_error without a reason")
            report.env_errors.append(out.grade.message)
        elif (status is GradeStatus.RESOLVED) != gold:
            report.wrongly_scored.append(f"episode {i} ({'gold' if gold else 'noop'}): {out.grade.message}")
    return recovered


async def _inject(
    fault: str,
    fleet: ChaosFleet,
    daemon: PrivateDockerd | None,
    daemon_clients: list[Any],
    containers: list[str],
) -> None:
    """The fault, while every episode's first command is in flight; then the release, then the lift."""
    if fault == "exec_kill":
        fleet.kill_exec(0)
        await _release(daemon_clients, containers)
        await asyncio.to_thread(fleet.start_exec, 0)
    elif fault == "pool_kill":
        fleet.kill_pool()
        await _release(daemon_clients, containers)
        await asyncio.to_thread(fleet.start_pool)
    elif fault == "node_cut":
        fleet.proxies[0].cut()
        await _release(daemon_clients, containers)
        await _node_down(fleet, 0)
        fleet.proxies[0].heal()
    elif fault == "slow_node":
        fleet.proxies[0].delay = SLOW_NODE_DELAY
        await _release(daemon_clients, containers)
    elif fault == "disk_full":  # filled later, before the submits (the hold's release needs an exec)
        await _release(daemon_clients, containers)
    elif fault == "daemon_restart":
        assert daemon is not None
        await asyncio.to_thread(daemon.kill)
        await _release(daemon_clients[:1], containers)  # node 1's episodes; node 0's die with the restart
        await asyncio.to_thread(daemon.start)
    else:  # grading_kill: the kills come at grading time (KillingClient)
        await _release(daemon_clients, containers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help="comma-separated, of: " + ", ".join(FAULTS)
    )
    parser.add_argument("--episodes", type=int, default=4, help="episodes per fault (the last one a noop)")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown or args.episodes < 2:
        parser.error(f"unknown faults {unknown}" if unknown else "--episodes must be at least 2")
    rounds = []
    for fault in faults:
        report = asyncio.run(run_round(fault, args.episodes))
        rounds.append(report)
        print(report.line(), flush=True)
        for reason in report.env_errors:
            print(f"  env_error ({fault}): {reason[:200]}", flush=True)
        for item in report.wrongly_scored + report.lost_silently:
            print(f"  !! {item[:300]}", flush=True)
    wrong = sum(len(r.wrongly_scored) for r in rounds)
    lost = sum(len(r.lost_silently) + r.pool_leases_left for r in rounds)
    leaked = sum(r.leaked for r in rounds)
    p50 = statistics.median(r.recovered for r in rounds) if rounds else 0.0
    episodes = sum(r.episodes for r in rounds)
    print(
        f"chaos: {len(rounds)} faults over {episodes} episodes, wrongly scored {wrong}, lost silently {lost}, "
        f"leaked containers {leaked}, recovered {p50:.1f} s p50"
    )
    return 1 if wrong or lost or leaked else 0


if __name__ == "__main__":
    sys.exit(main())
