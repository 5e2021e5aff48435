"""FleetGrader: patches graded in a fresh container of the real fixture images."""

from __future__ import annotations

from agent_fixtures import client_for, leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader, GraderConfig

INSTANCE = "more-itertools__more-itertools-9001"


async def test_gold_patch_is_resolved_and_a_broken_one_does_not_apply(
    client, pool, fixture_instances, docker_client
):
    instance = fixture_instances[INSTANCE]
    grader = FleetGrader(client)
    gold = await grader.grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED, gold.message
    assert sorted(gold.fail_to_pass.success) == sorted(instance.fail_to_pass)

    missing_file = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"
    broken = await grader.grade(instance, missing_file)
    assert broken.status is GradeStatus.PATCH_APPLY_FAILED

    unrelated = (
        "diff --git a/NOTES b/NOTES\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES\n@@ -0,0 +1 @@\n+hi\n"
    )
    unresolved = await grader.grade(instance, unrelated)
    assert unresolved.status is GradeStatus.UNRESOLVED and unresolved.fail_to_pass.failure
    assert not leftover_containers(docker_client, pool)


async def test_empty_patch_needs_no_container(client, pool, fixture_instances):
    result = await FleetGrader(client).grade(fixture_instances[INSTANCE], "  \n")
    assert result.status is GradeStatus.NO_PATCH
    assert (await client.status())["totals"]["leases"] == 0


async def test_slow_tests_are_an_eval_timeout(client, pool, fixture_instances):
    instance = fixture_instances[INSTANCE].model_copy(update={"eval_script": "#!/bin/bash\nsleep 30\n"})
    result = await FleetGrader(client, GraderConfig(eval_timeout=1)).grade(instance, instance.patch)
    assert result.status is GradeStatus.EVAL_TIMEOUT


async def test_fleet_failure_is_an_env_error(fleet, pool_factory, fixture_instances):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    srv.kill()
    instance = fixture_instances[INSTANCE]
    async with client_for(pool, allocate_deadline=2) as client:
        result = await FleetGrader(client).grade(instance, instance.patch)
    assert result.status is GradeStatus.ENV_ERROR and result.infra_failure
    assert "grading container" in result.message


async def test_missing_image_is_an_env_error(client, fixture_instances):
    instance = fixture_instances[INSTANCE].model_copy(update={"image": "swe-rl/missing:latest"})
    result = await FleetGrader(client).grade(instance, instance.patch)
    assert result.status is GradeStatus.ENV_ERROR and "ImageNotFound" in result.message


async def test_the_capability_scan_runs_while_the_container_runs_the_tests(
    client, pool, fixture_instances, docker_client, monkeypatch
):
    """The scan of the patched sources decides nothing of the run's script, so it reads them while the
    container runs the tests (on a large module it was most of the grader's own time per grading). Here
    the scan waits until the test run's call has gone out: run one after the other, it would wait in
    vain; its findings still reach the verdict. It runs on the event loop's own thread: in a thread of its
    own, two gradings' scans (or a scan beside the twins' parse) parsed at once, and CPython 3.11's
    ``ast.parse`` failed with "AST constructor recursion depth mismatch" (seen in CI)."""
    import threading

    from swe_rl.fleet.client import Lease
    from swe_rl.grading import pipeline
    from swe_rl.grading.scans.capabilities import CapabilityFinding, CapabilityReport

    running = threading.Event()
    evaluate, scan = Lease.evaluate, pipeline.scan_changes

    async def evaluating(self, *args, **kwargs):
        running.set()
        return await evaluate(self, *args, **kwargs)

    loop_thread = threading.current_thread()

    def scanning(*args, **kwargs) -> CapabilityReport:
        assert threading.current_thread() is loop_thread, "ast.parse off the loop's thread"
        beside = running.wait(timeout=120)
        found = scan(*args, **kwargs).findings
        marker = CapabilityFinding(
            path="x.py", line=1, capability="ctypes", detail=f"beside={beside}", action="void"
        )
        return CapabilityReport(findings=[*found, marker])

    monkeypatch.setattr(Lease, "evaluate", evaluating)
    monkeypatch.setattr(pipeline, "scan_changes", scanning)
    instance = fixture_instances[INSTANCE]
    result = await FleetGrader(client).grade(instance, instance.patch)
    details = [r.reason for r in result.tamper.records]
    assert any("beside=True" in d for d in details), details  # the scan overlapped the run
    assert not result.resolved and result.official.resolved  # and its finding voided the reward
    assert not leftover_containers(docker_client, pool)
