"""Gold and noop policies end to end on a real pool and exec server: the images, the exec path, the patch
at submit and grading in a fresh container. Gold on one fixture of each repository here; every fixture
goes through the agent loop once in tests/harnesses/test_gold_all_harnesses.py (all here with
``SWE_TEST_FULL_MATRIX=1``)."""

from __future__ import annotations

import asyncio

from adversarial_patches import FULL_MATRIX
from agent_fixtures import leftover_containers

from swe_rl.agent import AgentConfig, ExitReason, run_instance
from swe_rl.grading import GradeStatus
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies import GoldPolicy, NoopPolicy
from swe_rl.policies.gold import GOLD_PATCH_PATH

ONE_PER_REPOSITORY = (
    "jpvanhal__inflection-9002",
    "more-itertools__more-itertools-9002",
    "pytoolz__toolz-9003",
)
CONCURRENCY = 2  # two cores: an episode and a grading run each hold a container


async def test_gold_policy_resolves_a_fixture_of_each_repository(
    client, pool, fixture_instances, docker_client
):
    sem = asyncio.Semaphore(CONCURRENCY)
    policy, harness = GoldPolicy(), BashBlockHarness()

    async def one(instance):
        async with sem:
            return await run_instance(
                instance, policy, harness, client=client, config=AgentConfig(step_limit=5)
            )

    chosen = [i for i in fixture_instances.values() if FULL_MATRIX or i.instance_id in ONE_PER_REPOSITORY]
    assert len(chosen) >= len(ONE_PER_REPOSITORY)
    results = await asyncio.gather(*(one(i) for i in chosen))
    for result in results:
        instance = fixture_instances[result.instance_id]
        assert result.status is GradeStatus.RESOLVED, (
            result.instance_id,
            result.grade.message,
            result.agent.error,
        )
        agent = result.agent
        assert agent.exit_reason is ExitReason.SUBMITTED and len(agent.steps) == 2
        assert (
            agent.steps[0].action == f"git apply --verbose {GOLD_PATCH_PATH}"
            and agent.steps[0].returncode == 0
        )
        # the patch taken from the container is the gold patch's change (and nothing else)
        changed = [line for line in agent.patch.splitlines() if line.startswith(("+", "-"))]
        gold = [line for line in instance.patch.splitlines() if line.startswith(("+", "-"))]
        assert changed == gold
        assert agent.submission is not None and agent.submission.strip()
        assert not result.grade.fail_to_pass.failure and not result.grade.pass_to_pass.failure
        assert len(result.grade.fail_to_pass.success) == len(instance.fail_to_pass)
    assert not leftover_containers(docker_client, pool)


async def test_noop_policy_gives_no_patch(client, pool, fixture_instances, docker_client):
    instance = fixture_instances["jpvanhal__inflection-9001"]
    result = await run_instance(instance, NoopPolicy(), BashBlockHarness(), client=client)
    assert result.agent.exit_reason is ExitReason.SUBMITTED and len(result.agent.steps) == 1
    assert result.agent.patch == "" and result.agent.submission == ""
    assert result.status is GradeStatus.NO_PATCH and not result.resolved and not result.infra_failure
    assert not leftover_containers(docker_client, pool)


async def test_gold_policy_without_a_gold_patch_is_a_policy_error(client, pool, fixture_instances):
    instance = fixture_instances["jpvanhal__inflection-9001"].model_copy(update={"patch": ""})
    result = await run_instance(instance, GoldPolicy(), BashBlockHarness(), client=client)
    assert result.agent.exit_reason is ExitReason.POLICY_ERROR and "no gold patch" in result.agent.error
    assert result.status is GradeStatus.NO_PATCH
