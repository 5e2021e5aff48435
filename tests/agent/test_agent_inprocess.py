"""The agent loop end to end on the in-process environment (no Docker, milliseconds): a scripted
policy plays every harness over a tiny git repository, and the episode ends the way the fleet's
would: submitted with the patch, a tool error shown and survived, format errors, the step limit,
a command timeout, and an environment failure ending with env_error. The Docker twin is tests/agent/test_agent.py."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable

import pytest

from swe_rl.agent import AgentConfig, ExitReason, run_agent
from swe_rl.agent.local_environment import init_repo, local_env_factory
from swe_rl.agent.protocols import Environment, PolicyTurn
from swe_rl.harnesses.bash_block import SUBMIT_SENTINEL
from swe_rl.harnesses.registry import HARNESS_NAMES, harness_by_name
from swe_rl.tasks import TaskInstance

INSTANCE = TaskInstance(
    instance_id="tiny__repo-1", repo="tiny/repo", problem_statement="f() must return 2", image="unused"
)
SUBMIT = f"echo {SUBMIT_SENTINEL} && git add -A && git diff --cached"


class ScriptedPolicy:
    """Plays fixed turns; each is a text, or a function of the environment's workdir giving one."""

    def __init__(
        self,
        turns: list[str | Callable[[str], str]],
        on_turn: Callable[[int, Environment], Awaitable[None]] | None = None,
    ) -> None:
        self.turns, self.on_turn = list(turns), on_turn
        self.env: Environment | None = None
        self.seen: list[list[dict]] = []

    async def start_episode(self, instance: TaskInstance, env: Environment) -> None:
        self.env = env

    async def act(self, messages, **kwargs) -> PolicyTurn:
        assert self.env is not None
        self.seen.append(list(messages))
        if self.on_turn is not None:
            await self.on_turn(len(self.seen), self.env)
        if not self.turns:
            return PolicyTurn(text="I have nothing more to say.")
        turn = self.turns.pop(0)
        return PolicyTurn(text=turn(self.env.workdir) if callable(turn) else turn)


def bash(command: str) -> str:
    return f"Let me run this.\n```bash\n{command}\n```"


def tool(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# One fixing turn and one submitting turn per harness; the first also hits a missing file.
SCRIPTS: dict[str, list] = {
    "bash_block": [bash("cat nope.py"), bash("sed -i 's/return 1/return 2/' a.py"), bash(SUBMIT)],
    "codeact": [
        lambda w: tool("str_replace_editor", command="view", path=f"{w}/nope.py"),
        lambda w: tool(
            "str_replace_editor",
            command="str_replace",
            path=f"{w}/a.py",
            old_str="return 1",
            new_str="return 2",
        ),
        tool("finish", message="fixed"),
    ],
    "codex": [
        tool("read_file", file_path="nope.py"),
        tool(
            "apply_patch",
            input="*** Begin Patch\n*** Update File: a.py\n@@\n-    return 1\n+    return 2\n*** End Patch",
        ),
        tool("shell_command", command=SUBMIT),
    ],
    "opencode": [
        tool("read", file_path="nope.py"),
        tool("edit", file_path="a.py", old_string="return 1", new_string="return 2"),
        tool("bash", command=SUBMIT, description="submit"),
    ],
}


@pytest.fixture
def repo(tmp_path):
    return init_repo(tmp_path / "src", {"a.py": "def f():\n    return 1\n"})


@pytest.fixture
def factory(repo, tmp_path):
    return local_env_factory(repo, base_dir=tmp_path / "envs")


@pytest.fixture(autouse=True)
def _envs_dir(tmp_path):
    (tmp_path / "envs").mkdir()
    yield
    assert os.listdir(tmp_path / "envs") == []  # every episode's checkout is removed


@pytest.mark.parametrize("name", HARNESS_NAMES)
async def test_every_harness_fixes_and_submits(name, factory):
    assert set(SCRIPTS) == set(HARNESS_NAMES)
    policy = ScriptedPolicy(SCRIPTS[name])
    result = await run_agent(
        INSTANCE,
        policy,
        harness_by_name(name),
        env_factory=factory,
        config=AgentConfig(step_limit=5, command_timeout=10),
    )
    assert result.exit_reason is ExitReason.SUBMITTED, (result.error, result.steps)
    assert "-    return 1\n+    return 2" in result.patch and result.patch.startswith(
        "diff --git a/a.py b/a.py"
    )
    assert result.harness == name and len(result.steps) == 3
    first_observation = json.dumps(policy.seen[1][-1])
    assert "nope.py" in first_observation and (
        "does not exist" in first_observation or "No such file" in first_observation
    )


async def test_format_errors_end_the_episode(factory):
    policy = ScriptedPolicy(["no block here"] * 5)
    result = await run_agent(
        INSTANCE,
        policy,
        harness_by_name("bash_block"),
        env_factory=factory,
        config=AgentConfig(step_limit=10, max_format_errors=3),
    )
    assert result.exit_reason is ExitReason.FORMAT_ERRORS and result.format_errors == 3 and result.patch == ""


async def test_the_step_limit_keeps_the_changes_made(factory):
    policy = ScriptedPolicy([bash("echo new > b.txt"), bash("ls")])
    result = await run_agent(
        INSTANCE, policy, harness_by_name("bash_block"), env_factory=factory, config=AgentConfig(step_limit=2)
    )
    assert result.exit_reason is ExitReason.STEP_LIMIT and "+new" in result.patch


async def test_a_command_timeout_is_an_observation(factory):
    policy = ScriptedPolicy([bash("sleep 30"), bash(SUBMIT)])
    result = await run_agent(
        INSTANCE,
        policy,
        harness_by_name("bash_block"),
        env_factory=factory,
        config=AgentConfig(step_limit=3, command_timeout=0.3),
    )
    assert result.exit_reason is ExitReason.SUBMITTED and result.steps[0].timed_out
    assert result.steps[0].returncode == 124 and result.patch == ""


async def test_an_environment_failure_is_env_error_without_a_patch(factory):
    async def lose_env(turn: int, env: Environment) -> None:
        if turn == 2:
            await env.close()  # the environment goes away mid-episode (a lost lease on the fleet)

    policy = ScriptedPolicy([bash("echo x > b.txt"), bash("ls")], on_turn=lose_env)
    result = await run_agent(
        INSTANCE, policy, harness_by_name("bash_block"), env_factory=factory, config=AgentConfig(step_limit=5)
    )
    assert result.exit_reason is ExitReason.ENV_ERROR and result.infra_failure
    assert "LeaseLost" in (result.error or "") and result.patch == ""
