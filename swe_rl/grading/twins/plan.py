"""What one grading run plants of twins (`swe_rl.grading.twins.plant`): the twins, the tests skipped and why,
the text each file gets. Shared by the Python part and the Go/JavaScript/Rust part."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["Twin", "TwinPlan", "TwinSkip"]


class Twin(BaseModel):
    """One twin planted in the run."""

    original: str
    """The FAIL_TO_PASS test it copies (as the log reports it)."""
    test_id: str
    """Its own id as the log reports it (a parametrized twin gets pytest's ``[...]`` after it)."""
    file: str
    """The file carrying it (relative to the workdir)."""
    mutation: str
    """What was changed, in words."""
    swapped: bool = False
    """Names swapped (Python): in the run the twin's text had the original's name and the original the
    twin's; the log is read with them swapped back (`plant.unswapped_log`), so `test_id` names the twin's
    results there as for any twin."""


class TwinSkip(BaseModel):
    """A FAIL_TO_PASS test that got no twin, and why."""

    test: str
    reason: str


class TwinPlan(BaseModel):
    """What one grading run adds of twins: appended text per file, the twins, the tests skipped."""

    twins: list[Twin] = Field(default_factory=list)
    skipped: list[TwinSkip] = Field(default_factory=list)
    appends: dict[str, str] = Field(default_factory=dict)
    """File (relative to the workdir) -> text appended to it before the test command (cut off after)."""
    rewrites: dict[str, str] = Field(default_factory=dict)
    """File -> its whole text with twins inserted after their originals (Go, JavaScript, Rust), written
    before the test command and put back after it."""
    checks: dict[str, str] = Field(default_factory=dict)
    """File -> a shell command that must succeed with its twins in (it compiles), else the file is put back
    before the run: a twin that does not compile never breaks the task's test binary."""
    refused: str = ""
    """Why no twins at all ("" when some could be derived)."""
