"""The agent loop end to end: a scripted OpenAI-compatible server as the policy (through
litellm), the bash-block harness, a real pool over a real exec server, the real fixture
images, and grading in a fresh container."""

from __future__ import annotations

import asyncio
import time

import pytest
from agent_fixtures import client_for, leftover_containers

from swe_rl.agent import AgentConfig, ExitReason, run_agent, run_instance
from swe_rl.grading import GradeStatus
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies import OpenAIChatConfig, OpenAIChatPolicy
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI

TOOLZ = "pytoolz__toolz-9001"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
FIX = (
    "sed -i 's/iters = itertools.takewhile(predicate, iters)/"
    "iters = itertools.cycle(itertools.takewhile(predicate, iters))/' toolz/itertoolz.py"
)
REPRO = "python3 -c \"from toolz import interleave; print(''.join(interleave(('A', '123'))))\""


def bash(command: str, thought: str = "Next step.", **kw) -> ChatReply:
    return ChatReply(f"{thought}\n\n```bash\n{command}\n```", **kw)


def policy_for(server: FakeOpenAI) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(
        OpenAIChatConfig(
            model="fake/swe-policy", api_base=server.base_url, retries=0, temperature=0.6, top_k=20
        )
    )


def last_user(request: dict) -> str:
    return request["messages"][-1]["content"]


async def test_scripted_agent_fixes_an_instance_and_is_resolved(
    client, pool, fixture_instances, docker_client
):
    script = [
        bash(
            "grep -n 'takewhile' toolz/itertoolz.py",
            "Find the code.",
            reasoning_content="R1: look at interleave",
        ),
        bash(REPRO, "Reproduce.", reasoning_content="R2: reproduce"),
        bash(FIX, "Keep cycling over the remaining iterators."),
        ChatReply(
            "Check with python.\n\n```bash\npython3 - <<'EOF'\nfrom toolz import interleave\n"
            "print(list(interleave([[1, 2, 3], [4], [5, 6, 7]])))\nEOF\n```"
        ),
        bash(SUBMIT, "Submit."),
    ]
    with FakeOpenAI(script) as server:
        result = await run_instance(
            fixture_instances[TOOLZ],
            policy_for(server),
            BashBlockHarness(),
            client=client,
            config=AgentConfig(step_limit=10, command_timeout=60),
        )
    agent = result.agent
    assert agent.exit_reason is ExitReason.SUBMITTED, agent.error
    assert result.status is GradeStatus.RESOLVED and result.resolved, result.grade.message
    assert not result.infra_failure

    # the trajectory: one step per turn, each with its command, output and exit code
    assert [s.returncode for s in agent.steps] == [0, 0, 0, 0, 0]
    assert "245:            iters = itertools.takewhile" in agent.steps[0].observation
    assert agent.steps[1].observation.strip() == "A12"
    assert agent.steps[3].observation.strip() == "[1, 4, 5, 2, 6, 3, 7]"
    # the patch is the container's diff; the submitted text is the same change
    assert "+            iters = itertools.cycle(itertools.takewhile(predicate, iters))" in agent.patch
    assert agent.submission is not None and "itertools.cycle(itertools.takewhile" in agent.submission
    assert agent.usage.calls == 5 and agent.usage.completion_tokens > 0

    # thinking stays in the history: the second request carries the first turn's reasoning_content
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["reasoning_content"] == "R1: look at interleave"
    assert server.requests[4]["messages"][4]["reasoning_content"] == "R2: reproduce"
    assert agent.messages[2]["reasoning_content"] == "R1: look at interleave"
    # sampling parameters reach the server, top_k in the body
    assert server.requests[0]["temperature"] == 0.6 and server.requests[0]["top_k"] == 20
    assert "<returncode>0</returncode>" in last_user(server.requests[1])

    assert result.agent_seconds > 0 and result.grade_seconds > 0
    assert not leftover_containers(docker_client, pool)


async def test_format_errors_get_feedback_and_too_many_end_the_episode(
    client, pool, fixture_instances, docker_client
):
    script = [
        ChatReply("I believe the bug is in interleave."),  # no block
        ChatReply("```bash\nls\n```\nand\n```bash\npwd\n```"),  # two blocks
        bash("echo ok"),  # fine: the count restarts
        ChatReply("no block"),
        ChatReply("still none"),
        ChatReply("nothing again"),  # three in a row
    ]
    with FakeOpenAI(script) as server:
        result = await run_instance(
            fixture_instances[TOOLZ],
            policy_for(server),
            BashBlockHarness(),
            client=client,
            config=AgentConfig(step_limit=10, max_format_errors=3),
        )
    assert "no ```bash block" in last_user(server.requests[1])
    assert "2 ```bash blocks" in last_user(server.requests[2])
    assert "<output>\nok\n</output>" in last_user(server.requests[3])
    assert result.agent.exit_reason is ExitReason.FORMAT_ERRORS and server.calls == 6
    assert [s.format_error is not None for s in result.agent.steps] == [True, True, False, True, True, True]
    assert result.status is GradeStatus.NO_PATCH  # nothing was changed
    assert not leftover_containers(docker_client, pool)


async def test_step_limit_takes_the_patch_from_git_diff(client, pool, fixture_instances, docker_client):
    script = [bash(FIX, "Fix it."), bash("git status --short", "Look."), bash(SUBMIT, "never reached")]
    with FakeOpenAI(script) as server:
        result = await run_instance(
            fixture_instances[TOOLZ],
            policy_for(server),
            BashBlockHarness(),
            client=client,
            config=AgentConfig(step_limit=2),
        )
    assert result.agent.exit_reason is ExitReason.STEP_LIMIT and server.calls == 2
    assert result.agent.submission is None
    assert "itertools.cycle(itertools.takewhile" in result.agent.patch
    assert result.status is GradeStatus.RESOLVED  # the diff is graded like a submission
    # the last turns carried a remaining-steps reminder
    assert "1 answer left" in last_user(server.requests[1])
    assert not leftover_containers(docker_client, pool)


async def test_command_timeout_is_shown_to_the_agent(client, pool, fixture_instances, docker_client):
    script = [bash("echo started; sleep 30", "Slow."), bash(SUBMIT, "Give up.")]
    with FakeOpenAI(script) as server:
        result = await run_agent(
            fixture_instances[TOOLZ],
            policy_for(server),
            BashBlockHarness(),
            client=client,
            config=AgentConfig(step_limit=5, command_timeout=1.5),
        )
    step = result.steps[0]
    assert step.timed_out and step.returncode == 124 and step.exec_seconds < 15
    feedback = last_user(server.requests[1])
    assert "did not finish within 1.5 seconds and was killed" in feedback and "started" in feedback
    assert result.exit_reason is ExitReason.SUBMITTED and result.patch == ""


async def test_deadline_ends_the_episode_and_keeps_the_diff(client, pool, fixture_instances, docker_client):
    script = [bash("echo note > NOTES.txt", "Write a note."), bash("sleep 60", "Wait a long time.")]
    with FakeOpenAI(script) as server:
        started = time.monotonic()
        result = await run_agent(
            fixture_instances[TOOLZ],
            policy_for(server),
            BashBlockHarness(),
            client=client,
            config=AgentConfig(step_limit=5, command_timeout=120, deadline=6),
        )
    assert result.exit_reason is ExitReason.DEADLINE and "deadline" in result.error
    assert time.monotonic() - started < 30
    assert "+++ b/NOTES.txt" in result.patch and "+note" in result.patch
    assert result.steps[1].action == "sleep 60"
    assert not leftover_containers(docker_client, pool)


async def test_policy_failure_is_a_policy_error(client, pool, fixture_instances, docker_client):
    with FakeOpenAI([bash("true"), ChatReply("no such parameter", status=400)]) as server:
        result = await run_instance(
            fixture_instances[TOOLZ], policy_for(server), BashBlockHarness(), client=client
        )
    assert result.agent.exit_reason is ExitReason.POLICY_ERROR and "no such parameter" in result.agent.error
    assert result.agent.stop_reason == "bad_response"
    assert result.status is GradeStatus.NO_PATCH and not result.infra_failure
    assert not leftover_containers(docker_client, pool)


async def test_policy_endpoint_outage_is_an_env_error_not_graded(
    client, pool, fixture_instances, docker_client
):
    """A 5xx (or no answer) from the model's endpoint is an outage: env_error, and the patch is not graded."""
    with FakeOpenAI([bash("echo x > OUTAGE.txt"), ChatReply("overloaded", status=500)]) as server:
        result = await run_instance(
            fixture_instances[TOOLZ], policy_for(server), BashBlockHarness(), client=client
        )
    assert result.agent.exit_reason is ExitReason.POLICY_ERROR and result.agent.stop_reason == "unreachable"
    assert result.status is GradeStatus.ENV_ERROR and result.infra_failure
    assert (
        result.grade.message.startswith("policy endpoint: PolicyUnreachable")
        and "overloaded" in result.grade.message
    )
    assert not result.grade.method and not result.grade.test_log  # never sent to a grading container
    assert not leftover_containers(docker_client, pool)


async def test_missing_image_is_an_env_error(client, pool, fixture_instances, docker_client):
    instance = fixture_instances[TOOLZ].model_copy(update={"image": "swe-rl/no-such-image:latest"})
    with FakeOpenAI([bash(SUBMIT)]) as server:
        result = await run_instance(instance, policy_for(server), BashBlockHarness(), client=client)
    assert server.calls == 0
    assert result.agent.exit_reason is ExitReason.ENV_ERROR and "ImageNotFound" in result.agent.error
    assert result.status is GradeStatus.ENV_ERROR and result.infra_failure


async def test_dead_exec_server_is_an_env_error(fleet, pool_factory, fixture_instances, docker_client):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    srv.kill()
    async with client_for(pool, allocate_deadline=3) as client:
        with FakeOpenAI([bash(SUBMIT)]) as server:
            result = await run_instance(
                fixture_instances[TOOLZ], policy_for(server), BashBlockHarness(), client=client
            )
    assert result.agent.exit_reason is ExitReason.ENV_ERROR and "FleetUnavailable" in result.agent.error
    assert result.status is GradeStatus.ENV_ERROR and result.infra_failure


async def test_node_dying_mid_episode_is_an_env_error_not_a_score(
    fleet, pool_factory, fixture_instances, docker_client
):
    (srv,) = fleet(1)
    pool = pool_factory([srv])

    def kill_node_then_answer(request: dict) -> ChatReply:
        srv.kill()
        return bash(FIX, "Fix it.")

    async with client_for(pool, allocate_deadline=3, retries=1) as client:
        with FakeOpenAI([bash("ls"), kill_node_then_answer, bash(SUBMIT)]) as server:
            result = await run_instance(
                fixture_instances[TOOLZ], policy_for(server), BashBlockHarness(), client=client
            )
    assert result.agent.exit_reason is ExitReason.ENV_ERROR, result.agent.exit_reason
    assert result.status is GradeStatus.ENV_ERROR and result.infra_failure
    assert result.agent.patch == ""


async def test_cancelled_episode_releases_its_container(client, pool, fixture_instances, docker_client):
    with FakeOpenAI([bash("sleep 60")]) as server:
        task = asyncio.create_task(
            run_agent(
                fixture_instances[TOOLZ],
                policy_for(server),
                BashBlockHarness(),
                client=client,
                config=AgentConfig(command_timeout=120),
            )
        )
        deadline = time.monotonic() + 30
        while server.calls == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # the sleep is running in the container
        assert leftover_containers(docker_client, pool)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert (await client.status())["totals"]["leases"] == 0
    assert not leftover_containers(docker_client, pool)


async def test_agent_that_destroys_the_repository_gets_no_patch_not_an_env_error(
    client, pool, fixture_instances
):
    with FakeOpenAI([bash(FIX), bash("rm -rf .git"), bash(SUBMIT)]) as server:
        result = await run_instance(
            fixture_instances[TOOLZ], policy_for(server), BashBlockHarness(), client=client
        )
    assert result.agent.exit_reason is ExitReason.SUBMITTED
    assert result.agent.patch == "" and "no patch" in result.agent.error
    assert result.status is GradeStatus.NO_PATCH and not result.infra_failure
