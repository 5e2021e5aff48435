"""Rust: ``cargo test`` logs (swebench 5.x's ``parse_log_cargo``).

libtest prints ``test path::to::name ... ok`` (or ``FAILED``, ``ignored``) per test, for the unit tests
of the crate, each integration test file of ``tests/`` and the doc tests alike; names are not
qualified by their test binary. Only ``ok`` and ``FAILED`` count (an ignored test is not reported).
"""

from __future__ import annotations

import re

from swe_rl.grading.parsers.registry import FAILED, PASSED, register

_RESULT = re.compile(r"test\s+(\S+)\s+\.\.\.\s+(\w+)")
_STATUS = {"ok": PASSED, "FAILED": FAILED}


@register("parse_log_cargo")
def parse_cargo(log: str) -> dict[str, str]:
    """Test name -> status from libtest's ``test name ... outcome`` lines; a later line wins."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        found = _RESULT.fullmatch(line.strip())
        if found and found[2] in _STATUS:
            statuses[found[1]] = _STATUS[found[2]]
    return statuses
