"""What the client's container calls return: a command's and an evaluate call's results, decoded.

`ExecResult` and `EvalResult` are the caller's view of the wire's `ExecResponse` and
`EvaluateResponse` (`swe_rl.fleet.responses`), parsed from the answer by `from_response`. The agent,
the harnesses and the grader type against them; `swe_rl.fleet.client` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swe_rl.fleet import responses

__all__ = ["EvalResult", "ExecResult"]


@dataclass
class ExecResult:
    """A command's result as the caller sees it (the wire's `ExecResponse`, decoded)."""

    returncode: int
    output: str
    """stdout and stderr interleaved (stdout alone with `separate_stderr`); head and tail kept when truncated."""
    timed_out: bool
    truncated: bool
    output_bytes: int
    """Bytes the command printed in all, kept or not."""
    duration: float
    stderr: str | None = None
    """stderr, when asked for separately (`separate_stderr=True`); None otherwise."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @classmethod
    def from_response(cls, data: dict[str, Any]) -> ExecResult:
        r = responses.ExecResponse.model_validate(data)
        return cls(r.returncode, r.output, r.timed_out, r.truncated, r.output_bytes, r.duration, r.stderr)


@dataclass
class EvalResult:
    """An evaluate call's result (the wire's `EvaluateResponse`, decoded; the test log is not judged here)."""

    apply_status: str
    """"applied", "failed" (no strategy applied the patch) or "empty" (no patch)."""
    apply_strategy: str | None
    apply_output: str
    returncode: int | None
    """Exit code of the eval script; None when the patch did not apply."""
    test_log: str
    timed_out: bool
    truncated: bool
    duration: float

    @classmethod
    def from_response(cls, data: dict[str, Any]) -> EvalResult:
        answer = responses.EvaluateResponse.model_validate(data)
        return cls(**answer.model_dump(include=set(cls.__dataclass_fields__)))
