"""The seams of the agent: Policy, Harness, Environment, Grader, and the data they pass.

    Policy       produces one assistant turn from the message history (chat or tokens);
                 raises a `PolicyError` (swe_rl.agent.errors) when it cannot.
    Harness      turns an instance into the first messages, an assistant turn into
                 actions (or a `FormatError`), and command results into observations.
    ToolHarness  a Harness whose actions are tool calls: it has tool schemas (passed to the
                 policy) and runs its own ``tool`` actions in the environment.
    Environment  runs commands in one task container (a fleet lease, or anything else);
                 an `EnvFactory` opens one for an instance.
    Grader       judges a final patch for an instance in a fresh container.

The agent loop (`swe_rl.agent.loop`) only talks to these protocols, so a token-level
policy, a tool-calling harness or another sandbox plugs in without touching it.
Messages are OpenAI-style dicts (``{"role": ..., "content": ..., ...}``); the harness
alone decides how an assistant turn is kept in the history (`Harness.assistant_message`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.agent.errors import FormatError
from swe_rl.fleet.client import ExecResult
from swe_rl.grading.result import GradeResult
from swe_rl.tasks.instance import TaskInstance

__all__ = [
    "Action",
    "CommandResult",
    "EnvFactory",
    "Environment",
    "EpisodePolicy",
    "Grader",
    "Harness",
    "Message",
    "Policy",
    "PolicyTurn",
    "TokenUsage",
    "ToolHarness",
]

Message = dict[str, Any]
"""One chat message, OpenAI style."""

CommandResult = ExecResult
"""What running one command gives: returncode, output, timed_out, truncated, output_bytes, duration."""


class TokenUsage(BaseModel):
    """Token counts of one policy call, or summed over an episode."""

    prompt_tokens: int = 0
    """Tokens in the prompt (summed over calls: what was billed, not the context size)."""
    completion_tokens: int = 0
    """Tokens the policy generated, thinking included."""
    reasoning_tokens: int = 0
    """Of completion_tokens, those spent thinking (when the endpoint says)."""
    calls: int = 0
    """Policy calls counted."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(**{k: getattr(self, k) + getattr(other, k) for k in TokenUsage.model_fields})


class PolicyTurn(BaseModel):
    """One assistant turn as the policy produced it."""

    text: str
    """The visible answer (content)."""
    reasoning: str | None = None
    """Thinking text returned separately (``reasoning_content``), if any."""
    finish_reason: str | None = None
    """``stop``, ``length``, ``tool_calls``, ... as the endpoint reports it."""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    """Tokens of this call."""
    tool_calls: list[dict[str, Any]] | None = None
    """OpenAI-style tool calls, for tool-calling harnesses."""
    latency: float = 0.0
    """Seconds the call took."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Anything else a policy wants to keep (token ids, log-probs, raw response)."""


class Action(BaseModel):
    """One thing to run in the environment."""

    model_config = ConfigDict(frozen=True)

    command: str
    """Bash command line (for a tool call: its command, or a readable form of the call, for records)."""
    kind: str = "bash"
    """What sort of action: ``bash`` (run by the agent with `Environment.exec`) or ``tool`` (run by the
    `ToolHarness`'s ``run_action(env, action, timeout)``)."""
    call_id: str | None = None
    """Tool-call id the observation answers, for tool-calling harnesses."""
    name: str | None = None
    """Tool name of a ``tool`` action."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments of a ``tool`` action, checked against the tool's schema."""


@runtime_checkable
class Policy(Protocol):
    """Anything that answers a message history with one assistant turn."""

    async def act(self, messages: list[Message], **kwargs: Any) -> PolicyTurn:
        """Produce the next assistant turn; raise on failure (the agent records a policy_error), a
        `PolicyError` when the reason is worth keeping (its ``stop_reason`` goes to the result)."""
        ...


@runtime_checkable
class EpisodePolicy(Policy, Protocol):
    """A policy that wants to see the instance and its environment before the first turn
    (the gold policy places its patch with it)."""

    async def start_episode(self, instance: TaskInstance, env: Environment) -> None: ...


@runtime_checkable
class Harness(Protocol):
    """Prompts, parsing and observations of one action format (a harness whose actions are tool calls
    is a `ToolHarness` too)."""

    def initial_messages(self, instance: TaskInstance, **variables: Any) -> list[Message]:
        """System and instance messages that start an episode."""
        ...

    def assistant_message(self, turn: PolicyTurn) -> Message:
        """How the turn is kept in the history (content, reasoning, tool calls)."""
        ...

    def parse(self, turn: PolicyTurn) -> list[Action]:
        """The actions of the turn; raises `FormatError` when there is none to take."""
        ...

    def format_error_messages(self, error: FormatError, *, remaining_steps: int) -> list[Message]:
        """Feedback for a turn that did not parse."""
        ...

    def submission(self, action: Action, result: CommandResult) -> str | None:
        """The submitted text when this action ends the episode, else None."""
        ...

    def observation_messages(
        self,
        action: Action,
        result: CommandResult,
        *,
        remaining_steps: int,
        max_chars: int | None = None,
        timeout: float | None = None,
    ) -> list[Message]:
        """Messages that show the result of an action to the policy (timeout: the command's limit)."""
        ...


@runtime_checkable
class ToolHarness(Harness, Protocol):
    """A harness whose actions are tool calls (checked with ``isinstance``): the agent passes its
    ``tool_schemas`` to the policy as ``tools`` and lets it run its ``tool`` actions itself
    (`run_action`) instead of `Environment.exec`."""

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas."""
        ...

    async def run_action(
        self, env: Environment, action: Action, timeout: float | None = None
    ) -> CommandResult:
        """Run one ``tool`` action in the environment; fleet failures propagate, tool failures are results."""
        ...


@runtime_checkable
class Environment(Protocol):
    """One task container (a fleet lease, or `swe_rl.agent.local_environment` in unit tests).

    Failures are the `swe_rl.fleet.errors` tree: `FleetUnavailable` (infrastructure, the sample is
    dropped), `FileNotFound`, `IsADirectory`, `CommandRefused` and other `BadRequest` (the caller's doing).
    """

    @property
    def workdir(self) -> str:
        """Absolute path of the repository the commands start in (``/testbed`` in SWE-bench images)."""
        ...

    async def exec(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run a command in the workdir; a timeout is a result (timed_out), not an exception."""
        ...

    async def diff(self) -> str:
        """The working tree's changes against the base commit, new files included."""
        ...

    async def write_file(self, path: str, data: str | bytes) -> None: ...

    async def read_file(self, path: str) -> bytes: ...

    async def close(self) -> None:
        """Release the container; idempotent."""
        ...


EnvFactory = Callable[[TaskInstance], AbstractAsyncContextManager[Environment]]
"""Opens (and on exit releases) an environment for one instance: `swe_rl.agent.fleet_environment.fleet_env_factory`
leases from the fleet, `swe_rl.agent.local_environment.local_env_factory` clones a repository on this host."""


@runtime_checkable
class Grader(Protocol):
    """Judges a patch for an instance; infrastructure failures give status env_error."""

    async def grade(self, instance: TaskInstance, patch: str) -> GradeResult: ...
