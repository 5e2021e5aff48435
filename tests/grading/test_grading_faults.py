"""A grading container killed while it grades: ``env_error`` (removed from training), never a score.

The kill is real (``docker kill`` of the grading container) and lands at a known point: the grading
client hands the pipeline a lease whose next command first writes a mark and then waits for a go file
the test never creates; the test kills the container once the mark is there. Before the fix the
killed canonical-patch script came back as ``canonical patch script failed (137)`` and a killed test
run as a test log without results, graded ``unresolved`` (a reward of 0 for the fleet's failure).
"""

from __future__ import annotations

import pytest
from agent_fixtures import leftover_containers

from swe_rl.fleet.fakes.faults import KillingClient
from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader


@pytest.mark.parametrize("method", ["exec", "evaluate"], ids=["canonical-script", "test-run"])
async def test_a_grading_container_killed_mid_run_is_env_error(
    method, client, pool, fixture_instances, docker_client
):
    instance = fixture_instances["pytoolz__toolz-9001"]
    killing = KillingClient(client, docker_client, method)
    result = await FleetGrader(killing).grade(instance, instance.patch)  # type: ignore[arg-type]
    assert killing.killed, "the grading container was never killed"
    assert result.status is GradeStatus.ENV_ERROR and result.infra_failure, (result.status, result.message)
    assert not result.resolved and "died during the command" in result.message, result.message
    assert not leftover_containers(docker_client, pool)
    gold = await FleetGrader(client).grade(instance, instance.patch)  # the same fleet grades on
    assert gold.status is GradeStatus.RESOLVED, gold.message


async def test_a_command_that_kills_itself_keeps_its_137(client, pool, fixture_instances, docker_client):
    """Only a container that died answers 410: a SIGKILL inside a live container is the command's result."""
    instance = fixture_instances["pytoolz__toolz-9001"]
    async with client.lease(instance.image, instance_id=instance.instance_id) as lease:
        res = await lease.exec("kill -9 $$", timeout=60)
        assert res.returncode == 137 and not res.timed_out, res
        assert (await lease.exec("echo alive", timeout=60)).output.strip() == "alive"
    assert not leftover_containers(docker_client, pool)
