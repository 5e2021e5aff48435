"""The exceptions that steer the loop: a `PolicyError` ends the episode with exit policy_error and its
stop_reason on the result (no one asks the policy); any other policy exception leaves stop_reason None.
In-process environment, no Docker."""

from __future__ import annotations

import pytest

from swe_rl.agent import AgentConfig, ExitReason, run_agent
from swe_rl.agent.errors import (
    ContextExhausted,
    FormatError,
    PolicyAborted,
    PolicyBadResponse,
    PolicyError,
    PolicyUnreachable,
)
from swe_rl.agent.local_environment import init_repo, local_env_factory
from swe_rl.agent.protocols import PolicyTurn
from swe_rl.harnesses.registry import harness_by_name
from swe_rl.tasks import TaskInstance

INSTANCE = TaskInstance(
    instance_id="tiny__repo-1", repo="tiny/repo", problem_statement="f() must return 2", image="unused"
)


class FailingPolicy:
    """Answers one bash turn, then raises (or raises in start_episode)."""

    def __init__(self, error: Exception, at_start: bool = False) -> None:
        self.error, self.at_start, self.calls = error, at_start, 0

    async def start_episode(self, instance, env) -> None:
        if self.at_start:
            raise self.error

    async def act(self, messages, **kwargs) -> PolicyTurn:
        self.calls += 1
        if self.calls > 1:
            raise self.error
        return PolicyTurn(text="Looking.\n```bash\nls\n```")


@pytest.fixture
def factory(tmp_path):
    repo = init_repo(tmp_path / "src", {"a.py": "def f():\n    return 1\n"})
    return local_env_factory(repo, base_dir=tmp_path)


def test_every_policy_error_names_its_stop_reason():
    reasons = {
        cls: cls.stop_reason
        for cls in (ContextExhausted, PolicyAborted, PolicyUnreachable, PolicyBadResponse)
    }
    assert reasons == {
        ContextExhausted: "context_exhausted",
        PolicyAborted: "aborted",
        PolicyUnreachable: "unreachable",
        PolicyBadResponse: "bad_response",
    }
    assert all(issubclass(cls, PolicyError) and issubclass(cls, RuntimeError) for cls in reasons)
    assert not issubclass(FormatError, PolicyError)


@pytest.mark.parametrize(
    ("error", "stop_reason"),
    [
        (ContextExhausted("too long"), "context_exhausted"),
        (PolicyAborted("slime aborts"), "aborted"),
        (PolicyUnreachable("router down"), "unreachable"),
        (PolicyBadResponse("no log-probs"), "bad_response"),
        (ValueError("a bug"), None),
    ],
)
async def test_the_result_carries_the_policy_errors_stop_reason(factory, error, stop_reason):
    result = await run_agent(
        INSTANCE,
        FailingPolicy(error),
        harness_by_name("bash_block"),
        env_factory=factory,
        config=AgentConfig(step_limit=5, git_hygiene=False),
    )
    assert result.exit_reason is ExitReason.POLICY_ERROR  # the exit values stay as they were
    assert result.stop_reason == stop_reason
    assert result.error == f"{type(error).__name__}: {error}"
    assert len(result.steps) == 2


async def test_a_policy_error_at_episode_start_is_kept_too(factory):
    result = await run_agent(
        INSTANCE,
        FailingPolicy(PolicyAborted("early"), at_start=True),
        harness_by_name("bash_block"),
        env_factory=factory,
        config=AgentConfig(step_limit=5, git_hygiene=False),
    )
    assert result.exit_reason is ExitReason.POLICY_ERROR and result.stop_reason == "aborted"
    assert result.error == "start_episode: PolicyAborted: early"


async def test_episodes_that_end_otherwise_have_no_stop_reason(factory):
    class Submitter:
        async def act(self, messages, **kwargs) -> PolicyTurn:
            return PolicyTurn(text="```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")

    result = await run_agent(
        INSTANCE,
        Submitter(),
        harness_by_name("bash_block"),
        env_factory=factory,
        config=AgentConfig(step_limit=5, git_hygiene=False),
    )
    assert result.exit_reason is ExitReason.SUBMITTED and result.stop_reason is None
