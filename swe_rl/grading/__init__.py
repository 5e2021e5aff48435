"""Grading: is a patch a fix? SWE-bench's verdict, taken so that it cannot be bought.

- `result`: `GradeResult` / `GradeStatus`, what every grader returns.
- `logs`: a test log parsed and judged FAIL_TO_PASS / PASS_TO_PASS (`grade`) as swebench 5.x does:
  `parsers` (one module per language, keyed by 5.x's parser names; the row names its parser) and
  `rules` (5.x's decisions and log checks, and which of them decided where 4.1.0 would not agree).
- `fleet`: `FleetGrader`, the patch graded in a fresh container of the fleet (settings: `config`).
- `pipeline`: the stages of one grading, each a module with one typed result handed to the next:
  `canonical` (what git apply accepts, re-taken canonically) → `tree_rules` (the resulting tree judged,
  names normalised; `runner_config` reads settings with real parsers) → `capabilities` (syntax tree of
  the added code) → the test run with `canaries` → `logs` (parse, strict verdict) → `verdict`.
- `integrity`: the named rules, `TamperReport` and the official verdict kept beside ours;
  `patch_split` cuts unified diffs into files and hunks for them.
- `canaries` (tests the grader plants in the run, nonce markers around it) and `log_audit` (the run's
  log read as evidence: the nonce section, every status line, pytest's report and exit status);
  `runner_command` reads the eval script's test command for them.
- `baseline`: the repository's untracked files recorded before a patch, so a diff is the patch only.
- `certification`: the ledger of instances fit to train on (gold resolves, empty does not, flaky tests).
- `artifacts`: ``eval.log`` and ``report.json`` of one grade.

The names most callers need are importable from here.
"""

from swe_rl.grading.logs import (
    BuiltinGrader,
    BuiltinPytestGrader,
    GraderUnavailable,
    LogGrader,
    SwebenchGrader,
    default_grader,
    grade,
    parse_pytest_log,
)
from swe_rl.grading.result import ApplyStatus, GradeResult, GradeStatus, TestsReport

__all__ = [
    "BuiltinGrader",
    "ApplyStatus",
    "BuiltinPytestGrader",
    "GradeResult",
    "GradeStatus",
    "GraderUnavailable",
    "LogGrader",
    "SwebenchGrader",
    "TestsReport",
    "default_grader",
    "grade",
    "parse_pytest_log",
]
