"""Go: ``go test -v`` logs (swebench 5.x's ``parse_log_gotest``).

``go test -v`` ends every test, subtest included, with ``--- PASS|FAIL|SKIP: Name (0.01s)`` (indented
for subtests, which keep their ``Parent/child`` name). Nothing else counts: a build failure or a panic
before the line leaves the test out, so it grades as not run.
"""

from __future__ import annotations

import re

from swe_rl.grading.parsers.registry import FAILED, PASSED, SKIPPED, register

_RESULT = re.compile(r"--- (PASS|FAIL|SKIP): (.+) \((.+)\)")
_STATUS = {"PASS": PASSED, "FAIL": FAILED, "SKIP": SKIPPED}


@register("parse_log_gotest")
def parse_gotest(log: str) -> dict[str, str]:
    """Test name -> status from the ``--- RESULT: name (time)`` lines; a later line wins."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        found = _RESULT.fullmatch(line.strip())
        if found:
            statuses[found[2]] = _STATUS[found[1]]
    return statuses
