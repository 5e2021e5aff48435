"""What grading one patch gives: its status, the per-test report, and the integrity verdicts beside it.

`GradeResult` is what every grader returns (`swe_rl.grading.logs.grade` from a test log,
`swe_rl.grading.fleet.FleetGrader` in a fresh container) and what the agent, eval and the slime
layer read. ``env_error`` is kept apart from the policy's outcomes, so the caller can drop such a
sample instead of punishing it.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from swe_rl.grading.integrity import OfficialVerdict, TamperReport
from swe_rl.grading.twins.plan import TwinPlan

__all__ = ["ApplyStatus", "GradeResult", "GradeStatus", "TestsReport"]


class GradeStatus(str, Enum):
    """Outcome of grading one patch."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    NO_PATCH = "no_patch"
    PATCH_APPLY_FAILED = "patch_apply_failed"
    EVAL_TIMEOUT = "eval_timeout"
    ENV_ERROR = "env_error"


class ApplyStatus(str, Enum):
    """Whether the patch applied in the grading container."""

    APPLIED = "applied"
    FAILED = "failed"


class TestsReport(BaseModel):
    """Tests of one list (FAIL_TO_PASS or PASS_TO_PASS) split by outcome, as in SWE-bench's report."""

    __test__ = False  # not a pytest test class

    success: list[str] = Field(default_factory=list)
    """Tests that passed (or, for PASS_TO_PASS, were kept passing)."""
    failure: list[str] = Field(default_factory=list)
    """Tests that failed, errored, or are missing from the log."""


class GradeResult(BaseModel):
    """The grade of one patch for one instance."""

    instance_id: str
    """Which instance was graded."""
    status: GradeStatus
    """Overall outcome."""
    resolved: bool
    """SWE-bench's verdict: every FAIL_TO_PASS and PASS_TO_PASS test passes."""
    fail_to_pass: TestsReport = Field(default_factory=TestsReport)
    """Per-test outcome of FAIL_TO_PASS (R2E-Gym: of the expected statuses)."""
    pass_to_pass: TestsReport = Field(default_factory=TestsReport)
    """Per-test outcome of PASS_TO_PASS."""
    tests_status: dict[str, str] = Field(default_factory=dict)
    """Every test the log parser found, with its status (PASSED, FAILED, ...)."""
    method: str = ""
    """``swebench-log-parser:<parser>``, ``builtin-log-parser:<parser>``,
    ``r2e-expected-output:<parser>``, ``exit-code``, or empty when nothing was run."""
    message: str = ""
    """One line saying why, for logs and dashboards."""
    rule: str = ""
    """Where swebench 5.x's rules and 4.1.0's give different verdicts on this log: the 5.x rule(s)
    that decided (``skipped-fail-to-pass``, ``prefix-match``, ``suite-not-run``, ``exit-code``, ...,
    comma-separated; `swe_rl.grading.rules`); empty when both agree."""
    apply_strategy: str | None = None
    """How the patch went in on the fleet (``git apply``, ``git apply --ignore-whitespace``,
    ``patch --fuzz=5``); None when nothing was applied."""
    apply_output: str = ""
    """What the apply attempts printed (capped)."""
    eval_seconds: float | None = None
    """Wall time of the evaluation call (apply + tests) on the fleet."""
    network: bool | str = False
    """Network of the grading container (False: none; True: Docker's default; else its name)."""
    test_log: str = Field(default="", exclude=True)
    """The eval script's output; kept in memory for artifacts (eval.log), never serialized with the grade."""
    graded_patch: str = Field(default="", exclude=True)
    """Integrity grading: the patch the test run got (canonical, rules applied); kept in memory, never serialized."""
    tamper: TamperReport | None = None
    """Integrity grading: what of the agent's patch was dropped, trimmed or flagged before the run, and why."""
    official: OfficialVerdict | None = None
    """Integrity grading: the official harness's verdict on the full patch (this result is the integrity verdict)."""
    twins: TwinPlan | None = None
    """Integrity grading: the twins of FAIL_TO_PASS tests planted in the run, and the tests that got none (why)."""

    @property
    def infra_failure(self) -> bool:
        """Not the policy's fault: the sample should be dropped, not scored."""
        return self.status is GradeStatus.ENV_ERROR
