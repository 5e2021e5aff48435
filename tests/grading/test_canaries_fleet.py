"""Canaries and nonce markers in real runs: the instrumented eval script through `Lease.evaluate` in a
fresh container of the fixture images, gold and the class-1 forgeries of tests/adversarial_patches.py.

The grading here is what the pipeline does with `swe_rl.grading.canaries.plan` (FleetGrader wires it):
plan, run the instrumented script, parse strictly inside the nonce section, check the canaries. The
naive verdict is SWE-bench's reading of the same log. ``SWE_CANARY_TABLE=<file.json>`` writes the rows
of docs/reward_integrity.md.
"""

from __future__ import annotations

import json
import os

import pytest
from adversarial_patches import FORGERY_EXPLOITS, exploit_patches
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeResult, GradeStatus, grade
from swe_rl.grading.canaries.log_audit import FindingKind
from swe_rl.grading.canaries.plan import CanaryCheck, CanaryPlan, check_canaries, plan_canaries
from swe_rl.grading.patch.baseline import record_baseline
from swe_rl.tasks import TaskInstance, eval_script_for
from swe_rl.tasks.networks import network_for

SUITE = ["jpvanhal__inflection-9001", "more-itertools__more-itertools-9001"]
# What each forgery must trip, at least (the rest of its findings are in the table).
TRIPS = {
    "status_lines_tab": FindingKind.STATUS_OUTSIDE_REPORT,
    "status_lines_unicode_space": FindingKind.STATUS_OUTSIDE_REPORT,
    "fake_end_marker": FindingKind.STATUS_OUTSIDE_REPORT,
    "parent_stdout_self_kill": FindingKind.STATUSES_WITHOUT_SUMMARY,
    "report_patch_computed_import": FindingKind.CANARY_PASSED,
    "nonce_theft": FindingKind.STATUS_OUTSIDE_REPORT,
}
_TABLE: dict[str, dict[str, object]] = {}


async def run_with_canaries(
    client, instance: TaskInstance, patch: str
) -> tuple[CanaryPlan, str, GradeResult, GradeResult, CanaryCheck]:
    """(plan, log, naive grade, strict grade, canary check) of `patch` in a fresh container."""
    plan = plan_canaries(instance, eval_script_for(instance))
    async with client.lease(
        instance.image, instance_id=instance.instance_id, workdir=instance.workdir,
        network=network_for(instance, None), expected=0,
    ) as lease:  # fmt: skip
        await record_baseline(lease)
        run = await lease.evaluate(patch, plan.script, timeout=300)
        gone = await lease.exec("ls -a /tmp/.swe-rl", timeout=30)
    assert "eval.sh" not in gone.output  # the script was emptied and removed before the tests
    applied = run.apply_status == "applied"
    naive = grade(instance, patch=patch, apply_status=applied, test_log=run.test_log, timed_out=run.timed_out)
    ours = grade(
        instance, patch=patch, apply_status=applied, test_log=run.test_log, timed_out=run.timed_out,
        strict=True, nonce=plan.nonce,
    )  # fmt: skip
    return plan, run.test_log, naive, ours, check_canaries(plan, ours.tests_status, run.test_log)


def _record(instance_id: str, name: str, naive: GradeResult, ours: GradeResult, check: CanaryCheck) -> None:
    _TABLE.setdefault(name, {})[instance_id] = {
        "naive": naive.status.value,
        "ours": "unresolved" if check.tripped else ours.status.value,
        "found": sorted({f.kind.value for f in check.findings if f.tamper}),
    }
    if path := os.environ.get("SWE_CANARY_TABLE"):
        with open(path, "w") as fh:
            json.dump(_TABLE, fh, indent=1, sort_keys=True)


@pytest.mark.parametrize("instance_id", SUITE)
async def test_forged_output_earns_nothing_and_is_recorded(instance_id, client, pool, fixture_instances):
    instance = fixture_instances[instance_id]
    patches = await exploit_patches(client, instance, FORGERY_EXPLOITS)
    failures = []
    for exploit in FORGERY_EXPLOITS:
        plan, log, naive, ours, check = await run_with_canaries(client, instance, patches[exploit.name])
        _record(instance_id, exploit.name, naive, ours, check)
        found = {f.kind for f in check.findings if f.tamper}
        if not check.tripped or TRIPS[exploit.name] not in found or ours.resolved and not check.tripped:
            failures.append((exploit.name, sorted(found), ours.message, log[-3000:]))
        if exploit.name != "nonce_theft" and not naive.resolved:
            failures.append((exploit.name, "the naive grader does not pay: the exploit proves nothing"))
        if exploit.name == "nonce_theft" and "NONCE-THEFT " + plan.nonce in log:
            # the shell's memory was readable: a copy of the end marker only adds a line inside the section
            assert check.tripped and not ours.resolved
    assert not failures, failures


async def test_gold_resolves_with_canaries_on_every_fixture(client, pool, fixture_instances, docker_client):
    for instance in fixture_instances.values():
        plan, log, naive, ours, check = await run_with_canaries(client, instance, instance.patch)
        assert plan.must_fail and not plan.skipped
        assert ours.status is GradeStatus.RESOLVED and naive.resolved, (instance.instance_id, ours.message)
        assert not check.tripped, (instance.instance_id, check.findings, log[-3000:])
        for test in plan.must_pass:
            assert ours.tests_status[test] == "PASSED"
        for test in plan.must_fail:
            assert ours.tests_status[test] == "FAILED"
    assert not leftover_containers(docker_client, pool)
