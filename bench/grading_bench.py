"""Grading overhead per instance of the integrity pipeline, against the official harness's walk, in one run.

A local fleet (one exec server, one pool), real fixture images. For each instance and round, in
alternating order, through `FleetGrader`:
- ``official``: integrity off — one fresh container, the whole patch with the apply fallbacks, the
  eval script, SWE-bench's rules (the baseline, measured in the same run);
- ``pipeline``: integrity on (default) — canonical patch, tree rules, capability scan, test run with
  canaries, strict verdict; the official verdict comes from the same run when nothing was dropped;
- ``round 2``: the pipeline with the stages of issue 36's round three off (`ROUND_THREE_OFF`: the
  runner probe and the twins of the FAIL_TO_PASS tests), so that ``pipeline / round 2``
  is what round three costs per instance;
- ``stage 1``: the canonical patch alone on a fresh lease (baseline + `canonicalise`), for the share.
Patches: the gold patch (nothing dropped: one container), and the gold patch plus a conftest.py hack
(dropped: a second container runs the full patch for the official verdict).

    python bench/grading_bench.py [--rounds 3] [--instances jpvanhal__inflection-9001 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import time
from pathlib import Path

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.local import LocalFleet
from swe_rl.grading.baseline import record_baseline
from swe_rl.grading.canonical import canonicalise
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.tasks import TaskInstance, load_instances

ROUND_THREE_OFF = {"runner_probe": False, "twins": False}
"""`IntegrityConfig` switches of issue 36's round-three stages (off in the ``round 2`` column)."""
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "instances.jsonl"
HACK = """diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,3 @@
+import pytest
+def pytest_runtest_makereport(item, call):
+    pass
"""


async def stage_one(client: EnvClient, instance: TaskInstance, patch: str) -> float:
    async with client.lease(
        instance.image, instance_id=instance.instance_id, workdir=instance.workdir
    ) as lease:
        await record_baseline(lease)
        started = time.monotonic()
        canon = await canonicalise(lease, patch)
        assert canon.applied, canon.apply_output
        return time.monotonic() - started


async def timed(grader: FleetGrader, instance: TaskInstance, patch: str) -> float:
    started = time.monotonic()
    result = await grader.grade(instance, patch)
    assert result.status.value in ("resolved", "unresolved"), result.message
    return time.monotonic() - started


async def main_async(args: argparse.Namespace) -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    loaded = load_instances(FIXTURES, instance_ids=args.instances)
    rows = []
    with LocalFleet(exec_servers=1, max_containers_per_node=8, pool_env={"SWE_POOL_WARM_MIN": "0"}) as fleet:
        cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=900)
        async with EnvClient(cfg) as client:
            official = FleetGrader(client, GraderConfig(integrity=IntegrityConfig(enable=False)))
            pipeline = FleetGrader(client)
            round_two = FleetGrader(client, GraderConfig(integrity=IntegrityConfig(**ROUND_THREE_OFF)))
            for instance in loaded.instances:
                for label, patch in (("gold", instance.patch), ("gold+conftest", instance.patch + HACK)):
                    times: dict[str, list[float]] = {
                        "official": [],
                        "round 2": [],
                        "pipeline": [],
                        "stage 1": [],
                    }
                    for r in range(args.rounds):
                        order = [("official", official), ("round 2", round_two), ("pipeline", pipeline)]
                        for mode, grader in order if r % 2 == 0 else order[::-1]:
                            times[mode].append(await timed(grader, instance, patch))
                        times["stage 1"].append(await stage_one(client, instance, patch))
                    rows.append((instance.instance_id, label, times))
    print(f"\ngrading_bench: rounds={args.rounds} cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    print(
        f"{'instance':38} {'patch':14} {'official s':>10} {'round 2 s':>9} {'pipeline s':>10} {'ratio':>6} "
        f"{'r3 ratio':>8} {'stage 1 s':>9}"
    )
    ratios, round_three = [], []
    for iid, label, times in rows:
        o, r2, p, s = (statistics.median(times[k]) for k in ("official", "round 2", "pipeline", "stage 1"))
        ratios.append(p / o)
        round_three.append(p / r2)
        print(
            f"{iid:38} {label:14} {o:>10.2f} {r2:>9.2f} {p:>10.2f} {p / o:>5.2f}x {p / r2:>7.2f}x {s:>9.2f}"
        )
    print(f"  median ratio pipeline / official: {statistics.median(ratios):.2f}x")
    print(f"  median ratio round three on / off: {statistics.median(round_three):.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--instances", nargs="+", default=["jpvanhal__inflection-9001", "more-itertools__more-itertools-9001"]
    )
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
