"""Test-log parsers keyed by swebench 5.x's parser names (a row's ``log_parser``).

A parser is ``parse(log: str) -> dict[str, str]``: test id -> status, statuses being
PASSED / FAILED / SKIPPED / ERROR / XFAIL (what swebench's `TestStatus` names). One module per
language registers its parsers with `register`; a row names one by its ``log_parser`` field,
and `swe_rl.tasks.specs` gives the name for older rows without it. Each parser must give the
same map as swebench 5.x's function of that name on every log (tests/grading/test_official_5x.py).
"""

from __future__ import annotations

# Language modules register on import; keep this list in step with the files of this package.
from swe_rl.grading.parsers import go, javascript, python, rust  # noqa: F401
from swe_rl.grading.parsers.registry import (
    ERROR,
    FAILED,
    PARSERS,
    PASSED,
    SKIPPED,
    STATUSES,
    XFAIL,
    Parser,
    UnknownParser,
    parser_named,
    register,
)

__all__ = [
    "ERROR",
    "FAILED",
    "PARSERS",
    "PASSED",
    "SKIPPED",
    "STATUSES",
    "XFAIL",
    "Parser",
    "UnknownParser",
    "parser_named",
    "register",
]
