"""Canary tests in the grading run (stage 4 of the grading pipeline).

CONTRACT STUB (filled in by the canary work of issue 24): the names, fields and signatures below are
the interface the grading pipeline calls; the implementation plants nothing yet (the script is
returned unchanged and every check passes).

The grader adds tests it owns, with random names per run, among the task's tests in files the run
collects: some must fail and some must pass. A must-fail canary reported passed, or a must-pass one
missing, means the code under test forged the results. The eval script's start/end markers carry a
per-run nonce the code under test cannot know in advance.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, Field

from swe_rl.tasks import TaskInstance

__all__ = ["CanaryCheck", "CanaryPlan", "check_canaries", "plan_canaries"]


class CanaryPlan(BaseModel):
    """What one grading run plants: the instrumented eval script and the canaries' expected outcomes."""

    script: str
    """The eval script to run instead of the instance's (canaries planted after the test patch)."""
    nonce: str = ""
    """Per-run token in the start/end markers of the test output ("" = the standard markers)."""
    must_pass: list[str] = Field(default_factory=list)
    """Test ids (as the log parser reports them) that must be reported passed."""
    must_fail: list[str] = Field(default_factory=list)
    """Test ids that must be reported failed."""


class CanaryCheck(BaseModel):
    """The canaries' outcome in one run."""

    tripped: bool = False
    reasons: list[str] = Field(default_factory=list)


def plan_canaries(instance: TaskInstance, script: str, rng: random.Random | None = None) -> CanaryPlan:
    """Plant canaries in `script` (the instance's eval script)."""
    return CanaryPlan(script=script)


def check_canaries(plan: CanaryPlan, statuses: dict[str, str], test_log: str) -> CanaryCheck:
    """Did every canary come out as planted? `statuses` = the parsed test -> status map of the run."""
    return CanaryCheck()
