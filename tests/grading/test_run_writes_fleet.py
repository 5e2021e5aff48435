"""Files the test run writes, judged in real grading containers (issue 36): a module the code under test
writes at run time and imports by name is scanned like the patch and voids; the naive grader pays it.
Gold with the listing on, on every fixture: `test_every_fixture_gold_resolves_and_conftest_hacks_do_not`
(tests/grading/test_reward_integrity.py) and the multilang fleet tests, which fail on any record."""

from __future__ import annotations

from adversarial_patches import RUN_WRITES, exploit_patches
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader


async def test_a_module_written_at_run_time_voids(client, pool, fixture_instances, docker_client):
    instance = fixture_instances["jpvanhal__inflection-9001"]
    (exploit,) = RUN_WRITES
    (patch,) = (await exploit_patches(client, instance, [exploit])).values()
    assert "_pytest" not in patch and "TestReport" not in patch  # the payload is data in the patch
    result = await FleetGrader(client).grade(instance, patch)
    written = [r for r in result.tamper.records if r.rule == "run_written_file"]
    print(result.official.status, result.status.value, [(r.path, r.action, r.reason) for r in written])
    assert result.official.resolved, ("the exploit did not work: nothing to show", result.official.message)
    assert not result.resolved and result.status is GradeStatus.UNRESOLVED, result.message
    assert any(r.path.endswith("_speedups.py") and r.action == "voided" for r in written), (
        result.tamper.records
    )
    assert not leftover_containers(docker_client, pool)
