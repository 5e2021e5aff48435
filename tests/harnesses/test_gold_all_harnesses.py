"""The gold policy resolves the fixture instances through every harness (bash blocks, CodeAct, Codex,
OpenCode; each harness and call style on two instances, every instance at least once), two episodes at a time, on a real pool over a real exec server with grading in a fresh
container; tool calls both as OpenAI tool_calls (chat mode) and as Hermes text (token mode)."""

from __future__ import annotations

import asyncio

import pytest
from agent_fixtures import leftover_containers

from swe_rl.agent import AgentConfig, ExitReason, run_instance
from swe_rl.grading import GradeStatus
from swe_rl.harnesses.registry import HARNESS_NAMES, harness_by_name
from swe_rl.policies import GoldPolicy
from swe_rl.policies.gold import GOLD_PATCH_PATH

CONCURRENCY = 2  # two cores: an episode and a grading run each hold a container


async def test_gold_resolves_every_fixture_through_every_harness(
    client, pool, fixture_instances, docker_client
):
    sem = asyncio.Semaphore(CONCURRENCY)
    combos = [
        (name, style)
        for name in HARNESS_NAMES
        for style in (("chat", "hermes") if name != "bash_block" else ("chat",))
    ]
    instances = list(fixture_instances.values())
    # every harness in every call style, every instance at least once (the one agent-loop sweep of gold
    # over every fixture): a harness's correctness does not depend on the repo (every fixture x every
    # harness cost CI ~2 minutes more; two instances per call style ~1 more)
    runs = [
        (*combos[k % len(combos)], instances[k % len(instances)])
        for k in range(max(len(instances), len(combos)))
    ]
    assert {r[2].instance_id for r in runs} == set(fixture_instances)
    assert all(sum(r[:2] == c for r in runs) >= 1 for c in combos)

    async def one(name, style, instance):
        async with sem:
            result = await run_instance(
                instance,
                GoldPolicy(style=style),
                harness_by_name(name),
                client=client,
                config=AgentConfig(step_limit=5),
            )
        return name, style, result

    results = await asyncio.gather(*(one(*r) for r in runs))
    assert {name for name, _, _ in results} == set(HARNESS_NAMES)
    for name, style, result in results:
        instance = fixture_instances[result.instance_id]
        where = (name, style, result.instance_id, result.grade.message, result.agent.error)
        assert result.status is GradeStatus.RESOLVED, where
        agent = result.agent
        assert agent.exit_reason is ExitReason.SUBMITTED and len(agent.steps) == 2, where
        assert agent.harness == name and agent.format_errors == 0
        assert (
            agent.steps[0].action == f"git apply --verbose {GOLD_PATCH_PATH}"
            and agent.steps[0].returncode == 0
        )
        # the patch taken from the container is the gold patch's change (and nothing else)
        changed = [line for line in agent.patch.splitlines() if line.startswith(("+", "-"))]
        assert changed == [line for line in instance.patch.splitlines() if line.startswith(("+", "-"))], where
        assert agent.submission is not None and agent.submission.strip(), where
        grade = result.grade
        assert not grade.fail_to_pass.failure and not grade.pass_to_pass.failure, where
        assert len(grade.fail_to_pass.success) == len(instance.fail_to_pass), where
        if name != "bash_block":  # tool results come back as tool messages answering the call
            tool_messages = [m for m in agent.messages if m["role"] == "tool"]
            assert tool_messages[0]["tool_call_id"] == ("call_gold_0" if style == "chat" else "call_0")
            assert ("tool_calls" in agent.messages[2]) == (style == "chat")
    assert not leftover_containers(docker_client, pool)


async def test_gold_needs_a_known_shell_tool():
    with pytest.raises(ValueError, match="no shell tool"):
        await GoldPolicy().act([], tools=[{"type": "function", "function": {"name": "read"}}])
