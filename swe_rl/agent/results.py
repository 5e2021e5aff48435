"""What one episode gives: why it ended, its steps, its patch; and, graded, the instance's result.

`AgentResult` is the record eval and the slime layer keep of an episode (``traj.json``);
`InstanceResult` adds the grade of its patch. An ``env_error`` exit is the fleet's failure, to be
dropped from training, never scored.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from swe_rl.agent.git_hygiene import GitHygieneResult
from swe_rl.agent.monitor import flag_counts
from swe_rl.agent.protocols import Message, TokenUsage
from swe_rl.grading.result import GradeResult, GradeStatus

__all__ = ["AgentResult", "ExitReason", "InstanceResult", "Step"]


class ExitReason(str, Enum):
    """Why an episode ended."""

    SUBMITTED = "submitted"
    STEP_LIMIT = "step_limit"
    DEADLINE = "deadline"
    FORMAT_ERRORS = "format_errors"
    POLICY_ERROR = "policy_error"
    ENV_ERROR = "env_error"


class Step(BaseModel):
    """One policy turn and what came of it."""

    index: int
    """0-based turn number."""
    action: str | None = None
    """The command run, or None when the turn did not parse."""
    observation: str = ""
    """Command output as the environment returned it (before the harness shortened it)."""
    returncode: int | None = None
    """Exit code of the command (124 when it timed out)."""
    timed_out: bool = False
    """Whether the command was killed at command_timeout."""
    format_error: str | None = None
    """Why the turn did not parse, if it did not."""
    policy_seconds: float = 0.0
    """Time the policy took for this turn."""
    exec_seconds: float = 0.0
    """Time the command took, HTTP round trip included."""
    flags: list[str] = Field(default_factory=list)
    """Behaviour-monitor flags of this step's action (history_probe, test_edit, ...)."""


class AgentResult(BaseModel):
    """One episode: trajectory, exit, patch, usage."""

    instance_id: str
    """Which instance was played."""
    exit_reason: ExitReason
    """Why the episode ended."""
    patch: str = ""
    """Changes in the container at the end (`git diff` against the base commit, new files included)."""
    submission: str | None = None
    """What the submit command printed after the sentinel, when the agent submitted."""
    error: str | None = None
    """What went wrong, for policy_error and env_error."""
    stop_reason: str | None = None
    """Why the policy ended the episode, when it raised a `PolicyError` (exit policy_error): context_exhausted,
    aborted, unreachable, bad_response (`swe_rl.agent.errors`); None otherwise."""
    messages: list[Message] = Field(default_factory=list)
    """The full history, each assistant message with its reasoning_content."""
    steps: list[Step] = Field(default_factory=list)
    """Per-turn record."""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    """Tokens over all policy calls."""
    seconds: float = 0.0
    """Wall time of the episode, container allocation and final diff included."""
    harness: str | None = None
    """Name of the harness the episode was played with (``bash_block``, ``codeact``, ...)."""
    git_hygiene: GitHygieneResult | None = None
    """What was stripped from the repository's history before the first turn (None: hygiene off)."""

    @property
    def flag_counts(self) -> dict[str, int]:
        """Behaviour-monitor flag name -> steps carrying it."""
        return flag_counts(s.flags for s in self.steps)

    allocate_seconds: float | None = None
    """Time until the container was ready (None when allocation failed)."""
    warm: bool | None = None
    """Whether the fleet handed over a pre-started (warm) container; None when unknown."""
    fork: Any = Field(default=None, exclude=True, repr=False)
    """The `EpisodeFork` taken at `run_agent(fork_at=t)` (None otherwise; never serialised)."""
    resumed_at: int | None = None
    """The step this episode was resumed at, when it is a branch of a fork."""

    @property
    def infra_failure(self) -> bool:
        return self.exit_reason is ExitReason.ENV_ERROR

    @property
    def format_errors(self) -> int:
        """Turns that did not parse into an action."""
        return sum(1 for s in self.steps if s.format_error is not None)


class InstanceResult(BaseModel):
    """An episode and the grade of its patch."""

    instance_id: str
    """Which instance."""
    agent: AgentResult
    """The episode."""
    grade: GradeResult
    """The grade (env_error without grading when the episode failed on the fleet)."""
    agent_seconds: float = 0.0
    """Time of the episode."""
    grade_seconds: float = 0.0
    """Time of grading."""

    @property
    def status(self) -> GradeStatus:
        return self.grade.status

    @property
    def resolved(self) -> bool:
        return self.grade.resolved

    @property
    def infra_failure(self) -> bool:
        """Not the policy's fault: drop the sample, do not score it."""
        return self.grade.infra_failure
