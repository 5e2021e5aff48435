"""swebench 5.x's decision rules: which tests of FAIL_TO_PASS / PASS_TO_PASS a status map meets,
and when a log says nothing trustworthy at all.

What changed from 4.1.0 (each a rule name, reported in `GradeResult.rule` where it changed a verdict):

- ``skipped-fail-to-pass``: a skipped FAIL_TO_PASS test fails the instance (4.1.0: neither list);
- ``skipped-pass-to-pass``: a skipped PASS_TO_PASS test counts as kept (4.1.0: neither list);
- ``prefix-match``: an expected id cut inside its parameters (more ``[`` than ``]``) is the
  log's test starting with it, when all such tests agree on pass or fail (4.1.0: missing);
- ``suite-not-run``: no test parsed and no runner summary saying tests ran: not resolved, even
  ``fail_only`` where an absent test counts as passed (4.1.0: every fail-only test passed);
- ``exit-code``: the test command exited non-zero (``>>>>> Test Exit Code: N``, recorded by the
  eval script) while the log reports no failure or error: the log is not the run's;

4.1.0 already refused a log with the harness's own failure markers (``harness-marker``) or without
a complete test-output section (``no-test-markers``); those never differ.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swe_rl.grading.parsers import ERROR, FAILED, PASSED, SKIPPED, XFAIL
from swe_rl.grading.result import TestsReport
from swe_rl.tasks.specs import FAIL_ONLY

__all__ = ["LogCheck", "check_log", "legacy_report", "report", "resolve_case", "test_exit_code"]

PASSING = frozenset({PASSED, XFAIL})
TEST_EXIT_CODE = ">>>>> Test Exit Code"
_EXIT_CODE = re.compile(re.escape(TEST_EXIT_CODE) + r":\s*(-?\d+)")
# Markers the harness writes when a run went wrong; a log carrying one is not graded.
HARNESS_FAILURE_MARKERS = (
    ">>>>> Patch Apply Failed", ">>>>> Reset Failed", ">>>>> Tests Errored", ">>>>> Tests Timed Out",
)  # fmt: skip

# Runner summaries that prove tests executed (every count non-zero: "Executed 0 of 0" is no proof).
_SUITE_RAN = re.compile(
    "|".join(
        [
            r"Executed [1-9]\d* of \d+",  # karma
            r"TOTAL: [1-9]\d* (?:SUCCESS|FAILED)",  # karma summary
            r"[1-9]\d* passing",  # mocha
            r"Tests:\s+[1-9]\d*",  # jest
            r"Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total",  # jest
            r"^# tests [1-9]\d*",  # tap
            r"[1-9]\d* specs?, \d+ failures?",  # jasmine
            r"': ok$",  # openlayers' rendering cases
        ]
    ),
    re.M,
)


CHECKS_OF_4X = frozenset({"harness-marker", "no-test-markers"})
"""Log checks 4.1.0 made too (its ``get_logs_eval``)."""


def resolve_case(case: str, statuses: dict[str, str]) -> str | None:
    """The log's key for an expected test: itself, or (cut ids only) the agreeing prefix match."""
    if case in statuses:
        return case
    if case.count("[") > case.count("]"):
        found = [k for k in statuses if k.startswith(case)]
        if found and len({statuses[k] in PASSING for k in found}) == 1:
            return found[0]
    return None


def _split(tests: list[str], kept: Callable[[str], bool], lost: Callable[[str], bool]) -> TestsReport:
    rep = TestsReport()
    for test in tests:
        if kept(test):
            rep.success.append(test)
        elif lost(test):
            rep.failure.append(test)
    return rep


def report(
    statuses: dict[str, str], f2p: list[str], p2p: list[str], eval_type: str
) -> tuple[TestsReport, TestsReport, bool]:
    """(FAIL_TO_PASS, PASS_TO_PASS, resolved) under swebench 5.x's rules."""
    if eval_type == FAIL_ONLY:  # the parser sees failures only: exact ids, FAILED fails
        fails = lambda t: statuses.get(t) == FAILED  # noqa: E731
        a, b = _split(f2p, lambda t: not fails(t), fails), _split(p2p, lambda t: not fails(t), fails)
        return a, b, not a.failure and not b.failure

    seen: dict[str, str | None] = {}

    def status(test: str) -> str | None:  # each expected id resolved once (prefix scans are linear)
        if test not in seen:
            key = resolve_case(test, statuses)
            seen[test] = None if key is None else statuses[key]
        return seen[test]

    def passed(t: str) -> bool:
        return status(t) in PASSING

    def failed(t: str) -> bool:
        return status(t) in (None, FAILED, ERROR, SKIPPED)

    a = _split(f2p, passed, failed)
    b = _split(p2p, lambda t: passed(t) or status(t) == SKIPPED, failed)
    return a, b, not a.failure and not b.failure


def legacy_report(
    statuses: dict[str, str], f2p: list[str], p2p: list[str], eval_type: str
) -> tuple[TestsReport, TestsReport, bool]:
    """The same under swebench 4.1.0's rules (exact ids; a skipped test in neither list)."""
    if eval_type == FAIL_ONLY:
        return report(statuses, f2p, p2p, eval_type)
    kept = lambda t: statuses.get(t) in PASSING  # noqa: E731
    lost = lambda t: t not in statuses or statuses[t] in (FAILED, ERROR)  # noqa: E731
    a, b = _split(f2p, kept, lost), _split(p2p, kept, lost)
    return a, b, not a.failure and not b.failure


def test_exit_code(log: str) -> int | None:
    """The test command's exit status the eval script recorded (first record), or None."""
    found = _EXIT_CODE.search(log)
    return int(found.group(1)) if found else None


class LogCheck:
    """Why a log cannot be graded at all (5.x: ``get_logs_eval`` says "not found"), or ok."""

    def __init__(self, rule: str = "", reason: str = "") -> None:
        self.rule, self.reason = rule, reason

    def __bool__(self) -> bool:
        return not self.rule


def check_log(log: str, statuses: dict[str, str], *, markers: bool) -> LogCheck:
    """5.x's checks of a whole log around its parsed statuses; `markers`: the section was found."""
    bad = [m for m in HARNESS_FAILURE_MARKERS if m in log]
    if bad:
        return LogCheck("harness-marker", f"the log carries {bad[0]!r}")
    if not markers:
        return LogCheck("no-test-markers", "the log has no complete test-output section")
    if not statuses and not _SUITE_RAN.search(log):
        return LogCheck("suite-not-run", "no test result and no sign that the tests ran")
    code = test_exit_code(log)
    if code not in (None, 0) and statuses and not any(s in (FAILED, ERROR) for s in statuses.values()):
        return LogCheck("exit-code", f"the test command exited {code} but the log reports no failure")
    return LogCheck()
