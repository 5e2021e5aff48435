"""Typed records of what generate hands reward_func (and the dashboard, and saved runs) in ``sample.metadata``.

The keys on a sample are those slime's consumers and saved runs already read, so nothing on disk changes:

- ``metadata["swe"]`` — `RolloutRecord`, one end-to-end rollout (shared by its step samples);
- ``metadata["swe_step"]`` — `StepRecord`, which policy turn a step sample is (dynamic history);
- ``metadata["swe_segment"]`` — the context segment of a whole-trajectory sample;
- ``metadata["pivot"]`` — `PivotRow`, the input row of a pivot sample (``data/build_pivot_dataset.py``);
- ``metadata["pivot_result"]`` — `PivotRecord`, what pivot generate found.

Records allow extra keys (integrity fields, future additions) and are written back with only the keys
that were set, so a record read from an older run dumps as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swe_rl.harnesses.registry import TOOL_HARNESS_NAMES, harness_tool_schemas
from swe_rl.rewards.pivot import ExpertAction

__all__ = [
    "PIVOT_RESULT_KEY",
    "PIVOT_ROW_KEY",
    "SEGMENT_KEY",
    "STEP_KEY",
    "SWE_KEY",
    "TOOL_HARNESSES",
    "PivotRecord",
    "PivotRow",
    "RolloutRecord",
    "StepRecord",
]

SWE_KEY, STEP_KEY, SEGMENT_KEY = "swe", "swe_step", "swe_segment"
PIVOT_ROW_KEY, PIVOT_RESULT_KEY = "pivot", "pivot_result"
TOOL_HARNESSES = TOOL_HARNESS_NAMES  # the registry's tool-calling harnesses
"""Harness names a pivot row may give: their tool calls are Hermes / OpenAI tool calls."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=False)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None, key: str) -> Any:
        """The record stored under ``key``, or None."""
        value = (metadata or {}).get(key)
        return None if value is None else cls.model_validate(value)

    def to_metadata(self) -> dict[str, Any]:
        """The plain dict stored on the sample (only the keys that were set, extras included)."""
        return self.model_dump(exclude_unset=True)


class RolloutRecord(_Record):
    """``metadata["swe"]``: one end-to-end rollout, as `swe_rl.slime.e2e.generate` saw it."""

    removed: bool = False
    """Out of training (infrastructure failure, uncertified instance, flagged, ...): never a negative reward."""
    removed_reason: str | None = None
    """Why, ``<category>: <message>`` (``env_error``, ``rollout_timeout``, ``server_abort``, ``flagged``, ...)."""
    aborted: bool = False
    """slime aborted the request: handed back ABORTED, neither graded nor removed."""
    instance_id: str | None = None
    harness: str | None = None
    status: str | None = None
    """The grade status (``resolved``, ``unresolved``, ``no_patch``, ..., ``env_error`` when not graded)."""
    resolved: bool = False
    exit_reason: str | None = None
    """Why the agent loop ended (`swe_rl.agent.ExitReason` value)."""
    error: str | None = None
    stop_reason: str | None = None
    """The token policy's last stop reason (``aborted``, ``context_exhausted``, ``unreachable``, ...)."""
    steps: int = 0
    format_errors: int = 0
    patch_bytes: int = 0
    tokens: dict[str, Any] | None = None
    prefix_breaks: int = 0
    weight_versions: list[Any] = Field(default_factory=list)
    seconds: float | None = None
    episode: dict[str, Any] | None = None
    """Turns and fleet timings for the dashboard (`swe_rl.metrics.rollout.episode_stats`)."""
    prm: dict[str, Any] | None = None
    """The step judge's result (`swe_rl.rewards.prm.PRMResult` fields plus ``step_coef``, ``model``, ``m``)."""
    traj_dir: str | None = None

    @classmethod
    def from_sample(cls, sample: Any) -> RolloutRecord | None:
        return cls.from_metadata(getattr(sample, "metadata", None), SWE_KEY)


class StepRecord(_Record):
    """``metadata["swe_step"]``: which policy turn a step sample is, and its PRM score when judged."""

    turn: int
    segment: int
    of: int
    prm_score: float | None = None
    prm_status: str | None = None

    @classmethod
    def from_sample(cls, sample: Any) -> StepRecord | None:
        return cls.from_metadata(getattr(sample, "metadata", None), STEP_KEY)


class PivotRecord(_Record):
    """``metadata["pivot_result"]``: one pivot turn, as `swe_rl.slime.pivot.generate` scored it."""

    removed: bool = False
    removed_reason: str | None = None
    aborted: bool = False
    instance_id: str | None = None
    step_index: int | None = None
    pivot_id: str | None = None
    score: float | None = None
    category: str | None = None
    """`swe_rl.rewards.pivot.PivotCategory` value (``match``, ``mismatch``, ``wrong_tool``, ...)."""
    details: dict[str, Any] | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    response_tokens: int | None = None
    weight_versions: list[Any] | None = None
    seconds: float | None = None

    @classmethod
    def from_sample(cls, sample: Any) -> PivotRecord | None:
        return cls.from_metadata(getattr(sample, "metadata", None), PIVOT_RESULT_KEY)


class PivotRow(BaseModel):
    """``metadata["pivot"]`` of a pivot sample."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    """The context: OpenAI-style messages up to (not including) the expert's turn."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI tool schemas rendered into the system prompt (tool-calling harnesses); None for bash blocks."""
    expected_action: dict[str, Any]
    """The expert's action: ``{"tool": ..., "arguments": {...}}`` (a bash block is tool ``bash``)."""
    harness: str = "bash_block"
    """How the policy's turn is parsed: ``bash_block``, ``tool_call`` (Hermes ``<tool_call>``) or ``auto``; or
    a tool-calling harness by name (``codeact``, ``codex``, ``opencode``): its calls are parsed as ``tool_call``,
    and its tool schemas are the row's ``tools`` when the row has none."""
    workdir: str | None = None
    """The episode's working directory (paths are compared relative to it); None for the reward config's."""
    instance_id: str | None = None
    step_index: int | None = None
    """Index of the expert's turn among the trajectory's assistant turns."""
    source: str | None = None
    pivot_id: str | None = None

    @field_validator("messages")
    @classmethod
    def _context_ends_before_an_assistant_turn(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if value[-1].get("role") == "assistant":
            raise ValueError("the context must end before the expert's turn, not with an assistant message")
        return value

    @model_validator(mode="after")
    def _harness_tools(self) -> PivotRow:
        if self.tools is None:
            self.tools = harness_tool_schemas(self.harness)
        return self

    @property
    def parser(self) -> str:
        """How `swe_rl.rewards.pivot.parse_action` reads the policy's turn."""
        return "tool_call" if self.harness in TOOL_HARNESSES else self.harness

    def expert(self) -> ExpertAction:
        return ExpertAction.from_any(self.expected_action)
