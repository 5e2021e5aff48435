"""Grading: is a patch a fix? SWE-bench's verdict, taken so that it cannot be bought.

- `result`: `GradeResult` / `GradeStatus`, what every grader returns.
- `logs`: a test log parsed and judged FAIL_TO_PASS / PASS_TO_PASS (`grade`) as swebench 5.x does:
  `parsers` (one module per language, keyed by 5.x's parser names; the row names its parser) and
  `rules` (5.x's decisions and log checks, and which of them decided where 4.1.0 would not agree).
- `fleet`: `FleetGrader`, the patch graded in a fresh container of the fleet (settings: `config`).
- `pipeline`: the stages of one grading, read top to bottom, one subpackage each (its `__init__` names
  the entry module): `patch` (the canonical patch git apply accepts, diffs as data, the baseline) →
  `scans` (the resulting tree, runner settings, the capability scan of added code, the files the run
  wrote) → `runner` (the runner's configuration and its own machinery, asked of the runner) → the test
  run with `canaries` (nonce markers, canary tests, the log read as evidence) and `twins` (of the task's
  FAIL_TO_PASS tests) → `logs` → `verdict` (strict reading, the integrity verdict).
- `integrity`: the named rules, `TamperReport` and the official verdict kept beside ours (every stage's).
- `languages`: the Go/JavaScript/Rust table of parsers and test files.
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
