"""The strict verdict: an expected test passes only when the log says so and nothing contradicts it.

SWE-bench's own reading counts a test that never ran as neither passed nor failed, and takes the
last status line a test printed. Integrity grading judges FAIL_TO_PASS / PASS_TO_PASS stricter, so
that a patch cannot buy a reward by making tests vanish or by printing forged result lines: a
missing, skipped or errored test fails, and so does one the log reports with two statuses or whose
file failed to collect. `swe_rl.grading.logs` calls it under ``strict``; `integrity` re-exports it.
"""

from __future__ import annotations

from collections.abc import Mapping

from swe_rl.grading.canaries.log_audit import status_lines

__all__ = ["contradicted_tests", "strict_report"]

_OK = ("PASSED", "XFAIL")


def contradicted_tests(log: str, tests: set[str]) -> set[str]:
    """Expected tests that the log reports with more than one status (printed lines forging a result),
    and those of a test file whose collection failed (``ERROR path/to/test_file.py``).

    Every line the official pytest parser reads counts, whatever whitespace separates its words
    (`swe_rl.grading.canaries.log_audit.status_lines`): a line printed after pytest's own with a tab or a
    Unicode space would flip the official last-line-wins reading, so it must be seen here too."""
    seen: dict[str, set[str]] = {}
    broken_files = set()
    for line in status_lines(log):
        if line.test in tests:
            seen.setdefault(line.test, set()).add(line.status)
        elif line.status == "ERROR" and "::" not in line.test:
            broken_files.add(line.test)
    bad = {t for t, s in seen.items() if len(s) > 1}
    return bad | {t for t in tests if t.split("::", 1)[0] in broken_files}


def strict_report(
    statuses: Mapping[str, str],
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    log: str = "",
    also_contradicted: set[str] | None = None,
) -> tuple[list[str], list[str], list[str], list[str], str]:
    """(F2P success, F2P failure, P2P success, P2P failure, note): an expected test passes only when the log
    says PASSED (or XFAIL, as SWE-bench counts it) and nothing contradicts it; missing, skipped, errored and
    contradicted tests fail. ``also_contradicted``: tests another language's parser saw twice."""
    contradicted = contradicted_tests(log, set(fail_to_pass) | set(pass_to_pass)) if log else set()
    contradicted |= also_contradicted or set()

    def split(tests: list[str]) -> tuple[list[str], list[str]]:
        ok: list[str] = []
        bad: list[str] = []
        for t in tests:
            (ok if statuses.get(t) in _OK and t not in contradicted else bad).append(t)
        return ok, bad

    f_ok, f_bad = split(fail_to_pass)
    p_ok, p_bad = split(pass_to_pass)
    expected = list(fail_to_pass) + list(pass_to_pass)
    missing = sum(1 for t in expected if t not in statuses)
    skipped = sum(1 for t in expected if statuses.get(t) == "SKIPPED")
    notes = []
    if missing:
        notes.append(f"{missing} expected test(s) did not run")
    if skipped:
        notes.append(f"{skipped} skipped")
    if contradicted:
        notes.append(
            f"{len(contradicted)} contradicted in the log (two statuses, or their file failed to collect)"
        )
    return f_ok, f_bad, p_ok, p_bad, "; ".join(notes)
