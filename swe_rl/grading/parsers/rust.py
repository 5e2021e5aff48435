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


_FAILURE_HEADER = re.compile(r"---- (\S+) stdout ----")


def libtest_failures(log: str) -> dict[str, str]:
    """Test name -> FAILED for each failure libtest lists after its run (``---- name stdout ----``, and
    the names indented under ``failures:``).

    Why: the log merges cargo's stderr into the test binary's stdout, and the two can interleave
    mid-line (seen under load: ``test fjord_nectar ... error: test failed, ...`` with ``FAILED`` two
    lines later), so a failure's own result line may not parse. Not part of ``parse_log_cargo`` (kept
    equal to swebench's); read only where a missing result would wrongly count as tampering (canaries).
    A name it adds can only say FAILED, which earns nothing.
    """
    failed: dict[str, str] = {}
    listing = False
    for raw in log.split("\n"):
        line = raw.rstrip()
        header = _FAILURE_HEADER.fullmatch(line.strip())
        if header:
            failed[header[1]] = FAILED
            continue
        if line == "failures:":
            listing = True
            continue
        if listing:
            name = line.strip()
            if raw.startswith("    ") and name and " " not in name:
                failed[name] = FAILED
            elif name:
                listing = False
    return failed
