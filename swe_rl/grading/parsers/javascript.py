"""JavaScript / TypeScript: TAP, jest and vitest logs (swebench 5.x's parsers of those names).

TAP is what node's own runner prints with ``node --test --test-reporter=tap`` (and tape, node-tap,
mocha's TAP reporter): ``ok 3 - name`` / ``not ok 4 - name`` per test, indented for subtests. The name
is everything after the number, TAP's ``- `` included, as swebench keeps it. A ``# SKIP`` or ``# TODO``
directive stays part of an ``ok`` line's name, so such a test is reported passed under that longer
name (swebench's rule), never under the plain name a test list holds.
"""

from __future__ import annotations

import re

from swe_rl.grading.parsers.registry import FAILED, PASSED, SKIPPED, register

_RESULT = re.compile(r"(ok|not ok) (\d+) (.+)")


@register("parse_log_tap")
def parse_tap(log: str) -> dict[str, str]:
    """Test name -> status from TAP's ``ok N name`` / ``not ok N name`` lines; a later line wins."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        found = _RESULT.fullmatch(line.strip())
        if found:
            statuses[found[3]] = PASSED if found[1] == "ok" else FAILED
    return statuses


_JEST = re.compile(r"\s*(✓|✕|○)\s(.+?)(?:\s\((\d+\s*m?s)\))?")
_VITEST = re.compile(r"\s*(✓|×|↓)\s(.+?)(?:\s(\d+\s*m?s?|\[skipped\]))?")
_JEST_JSON = re.compile(r"\[(PASSED|FAILED)\]\s(.+)")
_MARKS = {"✓": PASSED, "✕": FAILED, "×": FAILED, "○": SKIPPED, "↓": SKIPPED}


def _marked(pattern: re.Pattern[str], log: str, *, strip: bool) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        found = pattern.fullmatch(line.strip())
        if found:
            statuses[found[2].strip() if strip else found[2]] = _MARKS[found[1]]
    return statuses


@register("parse_log_jest")
def parse_jest(log: str) -> dict[str, str]:
    """``jest --verbose``: ``✓ name (3 ms)``, ``✕ name``, ``○ name`` (skipped)."""
    return _marked(_JEST, log, strip=True)


@register("parse_log_vitest")
def parse_vitest(log: str) -> dict[str, str]:
    """``vitest --reporter=verbose``: ``✓ name 3ms``, ``× name``, ``↓ name [skipped]``."""
    return _marked(_VITEST, log, strip=False)  # names keep a space before a double-spaced time


@register("parse_log_jest_json")
def parse_jest_json(log: str) -> dict[str, str]:
    """jest ``--json`` turned into ``[PASSED] name`` / ``[FAILED] name`` lines by swebench's jq filter."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        found = _JEST_JSON.fullmatch(line.strip())
        if found:
            statuses[found[2]] = found[1]
    return statuses
