"""Issue 48's classes 1 and 2 in real grading containers: the runner changed through public names during
the run and modules imported from files no scan read (`RUNNER_GUARD` in tests/adversarial_patches.py) earn nothing, and the
runner guard (`swe_rl.grading.runner.guard`) alone voids each: the grader here has its other run-time
layers blind (the capability scan ignores every finding, no twins), so what voids is the guard.
Gold with the guard on, on every fixture: `test_every_fixture_gold_resolves_and_conftest_hacks_do_not`.

``SWE_GUARD_TABLE=<file.json>`` writes the rows of docs/reward_integrity.md."""

from __future__ import annotations

import json
import os

from adversarial_patches import RUNNER_GUARD, exploit_patches, graded_all
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.grading.scans.capabilities import CapabilityConfig
from swe_rl.grading.scans.capabilities.catalogue import CAPABILITIES

GUARD_RULES = {"runner_probe", "run_imported_module"}
NO_EFFECT = {"unittest_asserts_by_name"}
"""Exploits that change nothing on a pytest-style fixture (caught all the same)."""


async def test_the_guard_alone_voids_every_exploit(client, pool, fixture_instances, docker_client):
    instance = fixture_instances["jpvanhal__inflection-9001"]
    blind = IntegrityConfig(
        twins=False, capabilities=CapabilityConfig(actions={name: "ignore" for name in CAPABILITIES})
    )
    grader = FleetGrader(client, GraderConfig(integrity=blind))
    patches = await exploit_patches(client, instance, RUNNER_GUARD, concurrency=2)
    results = await graded_all(grader, instance, [patches[e.name] for e in RUNNER_GUARD], concurrency=2)
    table, failures = {}, []
    for exploit, result in zip(RUNNER_GUARD, results, strict=True):
        guard = [r for r in result.tamper.records if r.rule in GUARD_RULES and r.action == "voided"]
        table[exploit.name] = {
            "naive": result.official.status,
            "ours": result.status.value,
            "guard": [r.reason[:160] for r in guard][:3],
        }
        if result.resolved or result.status is not GradeStatus.UNRESOLVED or not guard:
            failures.append((exploit.name, result.status.value, result.message, result.tamper.records))
        if exploit.name not in NO_EFFECT and not result.official.resolved:
            failures.append(
                (exploit.name, "the exploit did not work: nothing to show", result.official.message)
            )
    if path := os.environ.get("SWE_GUARD_TABLE"):
        with open(path, "w") as fh:
            json.dump(table, fh, indent=1, sort_keys=True)
    assert not failures, failures
    assert not leftover_containers(docker_client, pool)
