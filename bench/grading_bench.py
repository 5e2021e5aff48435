"""Grading overhead per instance of the integrity pipeline, against the official harness's walk, in one run.

A local fleet (one exec server, one pool), real fixture images (the Python fixtures and the Go,
JavaScript and Rust ones). For each instance and round, the three graders one after the other, in
alternating order (round 0 official → round 2 → pipeline, round 1 the reverse...), through `FleetGrader`:
- ``official``: integrity off — one fresh container, the whole patch with the apply fallbacks, the
  eval script, SWE-bench's rules (the baseline, measured in the same run);
- ``round 2`` (today's grading before issue 36's round three): the pipeline with `ROUND_THREE_OFF` (the
  runner probes, the twins of the FAIL_TO_PASS tests, the files the run writes);
- ``pipeline``: integrity on (default), every stage.
The figure is paired: per instance and round, ``pipeline - round 2`` (seconds round three adds) and
``pipeline / round 2``; per instance the median over rounds; then over instances the p50 and the max.
The integrity cost per instance is the total of its gradings, pipeline over official: RL grades a group
of ``--n-samples-per-prompt`` patches per task (8 by default, as ``--rounds``), and the pipeline asks a
task's clean tree on its first grading only (the first and the later gradings are also shown apart).
``--stage-one`` adds the canonical patch alone on a fresh lease (baseline + `canonicalise`);
``--breakdown`` adds the pipeline with each round-three stage alone off (`ALONE_OFF`);
``--conftest`` adds the gold patch plus a conftest.py hack (dropped: a second container runs the full patch
for the official verdict). Every gold patch must resolve in every mode (a false trip stops the bench).
``--certified`` grades as training on a certified data set does: before an instance's rounds, untimed, one
gold grading writes its clean-tree answers to a store directory (what ``eval/certify.py run --clean-store``
does once per data set), then the process forgets what it kept, so the pipeline's first grading of the task
reads the store (`grading.clean_store`) as a rollout process's first grading does.
The pipeline keeps a task's clean-tree answers after its first grading (`grading.prerun`): with
``--rounds`` > 1 the first grading of each task and the later ones are also shown apart. Before the
table, per mode, where the time goes (`grading.timing`: seconds per stage, container calls per
operation, round trips; the pipeline's first grading of a task and its later ones apart). The last two lines:

    grading: round-three stages add X s p50 per instance (Y x today's grading), official Z s
    integrity cost: p50 R x (N instances)          (per instance: its gradings' total, pipeline / official)

    python bench/grading_bench.py [--rounds 8] [--data FILE ...] [--instances ID ...] [--stage-one] [--conftest]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.local import LocalFleet
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.grading.patch.baseline import record_baseline
from swe_rl.grading.patch.canonical import canonicalise
from swe_rl.grading.prerun import forget_clean_trees
from swe_rl.grading.timing import recording, stage, tick
from swe_rl.tasks import TaskInstance, load_instances
from swe_rl.tasks.networks import network_for

ROUND_THREE_OFF = {"runner_probe": False, "twins": False, "run_writes": False}
"""`IntegrityConfig` switches of issue 36's round-three stages (off in the ``round 2`` column)."""
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
JSONL = (FIXTURES / "instances.jsonl", FIXTURES / "instances_multilang.jsonl")
HACK = """diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,3 @@
+import pytest
+def pytest_runtest_makereport(item, call):
+    pass
"""
MODES = ("official", "round 2", "pipeline")
ALONE_OFF = {"no probe": "runner_probe", "no twins": "twins", "no writes": "run_writes"}
"""``--breakdown``: the pipeline with one round-three stage off (what that stage costs: pipeline - it)."""


async def stage_one(client: EnvClient, instance: TaskInstance, patch: str) -> float:
    async with client.lease(
        instance.image, instance_id=instance.instance_id, workdir=instance.workdir
    ) as lease:
        await record_baseline(lease)
        started = time.monotonic()
        canon = await canonicalise(lease, patch)
        assert canon.applied, canon.apply_output
        return time.monotonic() - started


def count_round_trips() -> None:
    """Every container call a lease makes, counted and timed per operation in the grading's clock."""
    call = Lease._call

    async def counted(
        self: Lease, op: str, body: dict[str, Any], timeout: float, retry: Any
    ) -> dict[str, Any]:
        tick("round trips")
        with stage(f"  {op} calls"):
            return await call(self, op, body, timeout, retry)

    Lease._call = counted  # type: ignore[method-assign]


async def timed(
    grader: FleetGrader,
    instance: TaskInstance,
    patch: str,
    stages: dict[str, list[dict[str, float]]],
    mode: str,
) -> float:
    started = time.monotonic()
    with recording() as clock:
        result = await grader.grade(instance, patch)
    assert result.status.value in ("resolved", "unresolved"), result.message
    assert result.resolved or patch != instance.patch, f"{mode}: gold not resolved: {result.message}"
    elapsed = time.monotonic() - started
    clock["total"] = elapsed
    stages.setdefault(mode, []).append(clock)
    return elapsed


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) by linear interpolation (q=0.5: the median)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def load(ids: list[str] | None, data: list[str] | None = None) -> list[TaskInstance]:
    out: list[TaskInstance] = []
    for path in data or JSONL:
        loaded = load_instances(path, instance_ids=ids)
        out += loaded.instances
    return out


async def main_async(args: argparse.Namespace) -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    instances = load(args.instances, args.data)
    rows = []
    stages: dict[str, list[dict[str, float]]] = {}
    count_round_trips()
    networks = list(dict.fromkeys(n for i in instances if isinstance(n := network_for(i, None), str)))
    with tempfile.TemporaryDirectory(prefix="swe-clean-store-") as folder:
        store = folder if args.certified else ""  # (removed whatever happens)
        with LocalFleet(  # with the networks rows name (a fixture that needs one: swe-rl-internal)
            exec_servers=1, max_containers_per_node=8, pool_env={"SWE_POOL_WARM_MIN": "0"}, networks=networks
        ) as fleet:
            cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=900)
            async with EnvClient(cfg) as client:
                graders = {
                    "official": FleetGrader(client, GraderConfig(integrity=IntegrityConfig(enable=False))),
                    "round 2": FleetGrader(
                        client, GraderConfig(integrity=IntegrityConfig(**ROUND_THREE_OFF))
                    ),
                    "pipeline": FleetGrader(client, GraderConfig(clean_store=store)),
                }
                base = tuple(m for m in MODES if m != "round 2" or not args.no_round_2)
                modes = base + (tuple(ALONE_OFF) if args.breakdown else ())
                for mode, switch in ALONE_OFF.items():
                    graders[mode] = FleetGrader(
                        client, GraderConfig(integrity=IntegrityConfig(**{switch: False}))
                    )
                patches = [("gold", lambda i: i.patch)]
                if args.conftest:
                    patches.append(("gold+conftest", lambda i: i.patch + HACK))
                for instance in instances:
                    for label, make in patches:
                        patch = make(instance)
                        times: dict[str, list[float]] = {m: [] for m in (*modes, "stage 1")}
                        if store:  # certification's grading (untimed), then a process that kept nothing
                            await timed(graders["pipeline"], instance, instance.patch, {}, "certification")
                            forget_clean_trees()
                        for r in range(args.rounds):
                            for mode in modes if r % 2 == 0 else modes[::-1]:
                                key = mode  # the pipeline's first grading of a task asks the clean tree
                                if mode == "pipeline" and args.rounds > 1:
                                    key = f"pipeline, {'first grading' if r == 0 else 'later gradings'}"
                                times[mode].append(await timed(graders[mode], instance, patch, stages, key))
                            if args.stage_one:
                                times["stage 1"].append(await stage_one(client, instance, patch))
                        rows.append((instance.instance_id, label, times))
                        print(
                            f"  {instance.instance_id} {label}: "
                            + ", ".join(f"{m} {times[m]}" for m in modes),
                            flush=True,
                        )
    breakdown(stages)
    report(rows, args.rounds)


def breakdown(stages: dict[str, list[dict[str, float]]]) -> None:
    """Per mode, each stage's median seconds over every grading (0 where a grading had no such stage);
    `other` = the grading's time outside every stage (the lease: container start and removal, verdicts)."""
    print("\nper-stage breakdown (median over gradings, seconds; indented: container calls by operation)")
    for mode, clocks in stages.items():
        names = list(dict.fromkeys(n for c in clocks for n in c if n not in ("total", "round trips")))
        top = [n for n in names if not n.startswith(" ")]
        print(
            f"  {mode}: total {statistics.median(c['total'] for c in clocks):.2f} s, round trips "
            f"{statistics.median(c.get('round trips', 0) for c in clocks):.0f}"
        )
        for name in names:
            print(f"    {name:38} {statistics.median(c.get(name, 0.0) for c in clocks):6.2f}")
        other = statistics.median(c["total"] - sum(c.get(n, 0.0) for n in top) for c in clocks)
        print(f"    {'other (lease, container, verdicts)':38} {other:6.2f}")


def report(rows: list[tuple[str, str, dict[str, list[float]]]], rounds: int) -> None:
    print(f"\ngrading_bench: rounds={rounds} cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    print(
        f"{'instance':38} {'patch':14} {'official s':>10} {'round 2 s':>9} {'pipeline s':>10} "
        f"{'r3 adds s':>9} {'r3 ratio':>8} {'vs official':>11}"
    )
    added, ratios, official, versus = [], [], [], []
    for iid, label, times in rows:
        o, r2, p = (times.get(m, []) for m in MODES)
        r2 = r2 or [float("nan")] * len(p)  # --no-round-2
        pair_add = statistics.median(b - a for a, b in zip(r2, p, strict=True))  # same round, paired
        pair_ratio = statistics.median(b / a for a, b in zip(r2, p, strict=True))
        pair_vs = sum(p) / sum(o)  # the task's group graded: what RL pays per task, side by side
        added.append(pair_add)
        ratios.append(pair_ratio)
        versus.append(pair_vs)
        official.append(statistics.median(o))
        stage = f" stage 1 {statistics.median(times['stage 1']):.2f} s" if times["stage 1"] else ""
        print(
            f"{iid:38} {label:14} {statistics.median(o):>10.2f} {statistics.median(r2):>9.2f} "
            f"{statistics.median(p):>10.2f} {pair_add:>9.2f} {pair_ratio:>7.2f}x {pair_vs:>10.2f}x{stage}"
        )
    with_round_2 = not any(math.isnan(r) for r in ratios)  # --no-round-2: no round-three figures
    if with_round_2:
        print(
            f"  round three on / off, per instance: p50 {percentile(ratios, 0.5):.2f}x, max {max(ratios):.2f}x; "
            f"seconds added: p50 {percentile(added, 0.5):.2f}, max {max(added):.2f}"
        )
    for mode in ALONE_OFF:
        costs = [
            statistics.median(p - a for a, p in zip(t[mode], t["pipeline"], strict=True))
            for _, _, t in rows
            if t.get(mode)
        ]
        if costs:
            print(f"  {ALONE_OFF[mode]} alone costs (pipeline - {mode}): p50 {percentile(costs, 0.5):.2f} s")
    print(
        f"  pipeline / official, per instance (its {rounds} gradings' total, as RL grades a group of "
        f"--n-samples-per-prompt patches per task): p50 {percentile(versus, 0.5):.2f}x, max {max(versus):.2f}x"
    )
    if with_round_2:
        print(
            f"grading: round-three stages add {percentile(added, 0.5):.2f} s p50 per instance "
            f"({percentile(ratios, 0.5):.2f}x today's grading), official {percentile(official, 0.5):.2f} s"
        )
    if rounds > 1:  # the first grading of a task asks the clean tree; the later ones reuse its answers
        for name, picked in (("first grading of a task", slice(0, 1)), ("later gradings", slice(1, None))):
            part = [
                statistics.median(
                    b / a for a, b in list(zip(t["official"], t["pipeline"], strict=True))[picked]
                )
                for _, _, t in rows
            ]
            print(f"  pipeline / official, {name}: p50 {percentile(part, 0.5):.2f}x, max {max(part):.2f}x")
    print(f"integrity cost: p50 {percentile(versus, 0.5):.2f}x ({len(versus)} instances)")  # issue 48's line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="gradings per task and mode (default 8: a group, the launch's --n-samples-per-prompt)",
    )
    p.add_argument(
        "--instances", nargs="+", default=None, help="instance ids (default: every bundled fixture)"
    )
    p.add_argument(
        "--data",
        nargs="+",
        default=None,
        help="instance files (default: the bundled fixtures); e.g. data/mined_tasks/instances.jsonl with "
        "--instances naming rows whose images are built",
    )
    p.add_argument("--stage-one", action="store_true", help="also time the canonical patch alone")
    p.add_argument(
        "--breakdown", action="store_true", help="also the pipeline with each round-three stage off"
    )
    p.add_argument("--conftest", action="store_true", help="also grade gold plus a dropped conftest.py hack")
    p.add_argument("--no-round-2", action="store_true", help="official and pipeline only (a loaded machine)")
    p.add_argument(
        "--certified",
        action="store_true",
        help="certification's answers in a clean-tree store first, as training on a certified data set",
    )
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
