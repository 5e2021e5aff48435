"""Reading a test run's log as evidence: the nonce section, every status line, pytest's own report.

The official parsers keep the last status a log gives a test. Code under test runs inside the test
process and can print too, so the integrity verdict reads the same lines without trusting their
order: only the section between the runner shell's nonce markers counts (`nonce_section`), every
line the official pytest parser would read is kept with its position (`status_lines`, whatever
whitespace separates its words), and pytest's report must hold together (`audit_pytest_log`):

- status lines belong in pytest's short test summary (between its ``short test summary info``
  header and its final ``N failed, M passed in Xs`` line) or in the captured output of tests before
  it; one printed before pytest's sections, after its final line, or inside the summary in a shape
  pytest never prints (tabs, several or other Unicode spaces) was not printed by pytest;
- status lines without pytest's final line: pytest never reported (a forger wrote them and died);
- the final line's counts equal the summary's lines; pytest's exit status (printed by the runner
  shell on the end marker) agrees with them.

Each break is a `LogFinding`; ``tamper`` findings void the reward (the pipeline records them).
"""

from __future__ import annotations

import functools
import hashlib
import re
from enum import Enum

from pydantic import BaseModel, Field

from swe_rl.tasks.eval_scripts import RUN_END_MARKER, RUN_START_MARKER

__all__ = [
    "FindingKind",
    "LogFinding",
    "NonceSection",
    "StatusLine",
    "audit_pytest_log",
    "nonce_section",
    "start_token",
    "status_lines",
]

STATUS_WORDS = ("FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL", "XPASS")
"""Words that start a status line (swebench's `TestStatus` and pytest's XPASS)."""
SUCCESS = frozenset({"PASSED", "XFAIL", "XPASS"})
FAILURE = frozenset({"FAILED", "ERROR"})


class FindingKind(str, Enum):
    """What is wrong with a run's log."""

    NO_TEST_SECTION = "no_test_section"
    """The runner never printed its start marker: the tests did not run (not the code under test's doing)."""
    END_MARKER_MISSING = "end_marker_missing"
    """The start marker is there, the end marker (with the nonce and pytest's exit status) is not."""
    STATUS_OUTSIDE_REPORT = "status_outside_report"
    """A status line where pytest prints none (before its sections, after its final line)."""
    FORGED_STATUS_SHAPE = "forged_status_shape"
    """A status line in pytest's short summary that pytest would not print that way (whitespace)."""
    STATUSES_WITHOUT_SUMMARY = "statuses_without_summary"
    """Status lines but no pytest final line: pytest never reported."""
    SUMMARY_COUNTS = "summary_counts"
    """pytest's final line counts differ from its summary's lines."""
    EXIT_STATUS = "exit_status"
    """pytest's exit status disagrees with the results reported."""
    CANARY_PASSED = "canary_passed"
    """A canary that must fail was reported passed (results were forged)."""
    CANARY_MISSING = "canary_missing"
    """A canary was not reported (results were hidden or dropped)."""
    CANARY_NOT_PASSED = "canary_not_passed"
    """A canary that must pass was reported otherwise."""


class LogFinding(BaseModel):
    """One way a run's log does not hold together."""

    kind: FindingKind
    detail: str
    """In words, with the offending line or counts."""
    tests: list[str] = Field(default_factory=list)
    """Test ids concerned, when any."""
    tamper: bool = True
    """Evidence of forging: voids the reward and is recorded; False: a note (the run is judged as is)."""


class StatusLine(BaseModel):
    """A line one of the official pytest-style parsers reads as a test's status."""

    index: int
    """Line number in the text read (0-based)."""
    status: str
    """The status word as the official parser keeps it (``PASSED``, ...; anything starting so)."""
    test: str
    form: str = "start"
    """``start``: ``STATUS id`` as ``parse_log_pytest`` reads it; ``stripped``: read so only once colour
    codes and control characters are removed (``parse_log_pytest_v2``: astropy, scikit-learn, sphinx);
    ``trailing``: ``id STATUS`` (v2's older-pytest form, seaborn's verbose form)."""
    canonical: bool = False
    """Shaped as pytest prints it in its summary: ``STATUS id`` (FAILED/ERROR: `` - reason``), single spaces."""


_CANONICAL = re.compile(r"^(?:FAILED|PASSED|SKIPPED|ERROR|XFAIL|XPASS) \S+(?: - .*| .*)?$")
_COLOUR = re.compile(r"\[(\d+)m")
_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def _start_form(line: str) -> list[str] | None:
    if not line.startswith(STATUS_WORDS):
        return None
    words = (line.replace(" - ", " ") if line.startswith("FAILED") else line).split()
    return words if len(words) >= 2 else None


def status_lines(text: str) -> list[StatusLine]:
    """Every line swebench's pytest-style parsers read as a status, in order (not last-wins).

    Same readings as the official parsers: a line starting with a status word, FAILED's `` - ``
    dropped, split on any whitespace (str.split: tabs, runs of spaces, Unicode spaces), the second
    word being the test id; the same after v2's removal of colour codes and control characters; and
    v2's / seaborn's ``id STATUS`` lines. Read once per text: the verdict's checks (strict report,
    canaries, twins, audit) each ask it of the same run's section (thousands of lines on a large suite)."""
    return list(_status_lines(text))


@functools.lru_cache(maxsize=4)
def _status_lines(text: str) -> tuple[StatusLine, ...]:
    out: list[StatusLine] = []
    for i, line in enumerate(text.split("\n")):
        words = _start_form(line)
        if words:
            canonical = bool(_CANONICAL.match(line.rstrip("\r"))) and words[0] in STATUS_WORDS
            out.append(StatusLine(index=i, status=words[0], test=words[1], canonical=canonical))
            continue
        clean = _COLOUR.sub("", line).translate(_CONTROL)
        words = _start_form(clean)
        if words:
            out.append(StatusLine(index=i, status=words[0], test=words[1], form="stripped"))
            continue
        words = clean.split()
        if len(words) >= 2 and (clean.endswith(STATUS_WORDS) or words[1] == "PASSED"):
            out.append(StatusLine(index=i, status=words[1], test=words[0], form="trailing"))
    return tuple(out)


# ----------------------------------------------------------------------------- nonce section


def start_token(nonce: str) -> str:
    """The start marker's token: derived one way from the nonce, so a leaked start line gives nothing."""
    return hashlib.sha256(f"swe-rl start {nonce}".encode()).hexdigest()[:32]


class NonceSection(BaseModel):
    """The part of a log between the runner shell's nonce markers."""

    text: str
    exit_status: int | None
    """The test command's exit status, as the runner shell printed it on the end marker."""


def nonce_section(log: str, nonce: str) -> NonceSection | LogFinding:
    """The text between the first ``RUN_START_MARKER <start_token(nonce)>`` line and the last
    ``RUN_END_MARKER <nonce> exit <n>`` line after it; a finding when either is missing.

    First and last: the start marker is printed before the tests run and the end marker after every
    process they started is dead, so no line of theirs can come before the one or after the other
    on pytest's stream; a copy printed by the code under test (had it learnt the nonce) only adds a
    line inside the section."""
    start = re.search(rf"^{re.escape(RUN_START_MARKER)} {start_token(nonce)}\r?$", log, flags=re.MULTILINE)
    if start is None:
        return LogFinding(
            kind=FindingKind.NO_TEST_SECTION,
            detail="the runner's start marker is not in the log: the tests did not run",
            tamper=False,
        )
    end = re.compile(rf"^{re.escape(RUN_END_MARKER)} {re.escape(nonce)} exit (-?\d+)\r?$", flags=re.MULTILINE)
    found = next(reversed(list(end.finditer(log, start.end()))), None)
    if found is None:
        return LogFinding(
            kind=FindingKind.END_MARKER_MISSING,
            detail="the runner's end marker (nonce and exit status) never came: the runner was killed "
            "or its output cut",
        )
    return NonceSection(text=log[start.end() + 1 : found.start()], exit_status=int(found.group(1)))


# ----------------------------------------------------------------------------- pytest's report

_FINAL = re.compile(
    r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran)(?: in [\d.]+ ?s(?:econds)?(?: \([^)]*\))?)\s*=*\s*$"
)
_COUNT = re.compile(r"(\d+) ([a-z]+)")
_SECTION = re.compile(r"^=+ .+ =+\s*$")
_SESSION = re.compile(r"^=+ test session starts =+\s*$")
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+\s*$")
_SKIP_COUNT = re.compile(r"^SKIPPED \[(\d+)\]")
_WORDS = {"error": "errors", "warning": "warnings"}
_LINE_COUNTED = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "errors",
    "XFAIL": "xfailed",
    "XPASS": "xpassed",
}


def _final_counts(line: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n, word in _COUNT.findall(line.split(" in ")[0]):
        counts[_WORDS.get(word, word)] = int(n)
    return counts


def audit_pytest_log(
    section: str, *, exit_status: int | None, expect_failures: bool, captured: bool = True
) -> list[LogFinding]:
    """Check that the status lines of a pytest ``-rA`` run's section are pytest's own.

    ``expect_failures``: tests that must fail ran (canaries), so pytest must exit 1;
    ``captured``: output capture was on (``-s`` puts tests' prints among pytest's progress lines)."""
    lines = section.split("\n")
    found = status_lines(section)
    findings: list[LogFinding] = []
    final = max((i for i, line in enumerate(lines) if _FINAL.match(line)), default=None)
    if final is None:
        found = [s for s in found if s.form != "trailing"]
        if found:
            findings.append(
                LogFinding(
                    kind=FindingKind.STATUSES_WITHOUT_SUMMARY,
                    detail=f"{len(found)} status line(s) but no pytest final line: pytest never reported "
                    f"(first: {lines[found[0].index][:200]!r})",
                    tests=sorted({s.test for s in found})[:50],
                )
            )
        return findings
    header = max((i for i in range(final) if _SUMMARY_HEADER.match(lines[i])), default=None)
    session = next((i for i in range(final) if _SESSION.match(lines[i])), -1)
    first_section = next(
        (i for i in range(session + 1, final + 1) if _SECTION.match(lines[i]) or _FINAL.match(lines[i])),
        final,
    )
    after = [s for s in found if s.index > final]
    before = [s for s in found if s.index < first_section and s.form != "trailing"] if captured else []
    for where, group in (("after pytest's final line", after), ("before pytest's report sections", before)):
        if group:
            findings.append(
                LogFinding(
                    kind=FindingKind.STATUS_OUTSIDE_REPORT,
                    detail=f"{len(group)} status line(s) {where}: {lines[group[0].index][:200]!r}",
                    tests=sorted({s.test for s in group})[:50],
                )
            )
    block = [s for s in found if header is not None and header < s.index < final and s.form != "trailing"]
    odd = [s for s in block if not s.canonical]
    if odd:
        findings.append(
            LogFinding(
                kind=FindingKind.FORGED_STATUS_SHAPE,
                detail=f"{len(odd)} status line(s) in pytest's summary not shaped as pytest prints them: "
                f"{lines[odd[0].index][:200]!r}",
                tests=sorted({s.test for s in odd})[:50],
            )
        )
    counts = _final_counts(lines[final])
    listed: dict[str, int] = {}
    for s in block:
        if s.canonical and s.status in _LINE_COUNTED:
            key = _LINE_COUNTED[s.status]
            listed[key] = listed.get(key, 0) + 1
    if header is not None:
        diff = {k: (counts.get(k, 0), listed.get(k, 0)) for k in _LINE_COUNTED.values()}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        skips = [int(m.group(1)) for i in range(header + 1, final) if (m := _SKIP_COUNT.match(lines[i]))]
        if skips and sum(skips) != counts.get("skipped", 0):
            diff["skipped"] = (counts.get("skipped", 0), sum(skips))
        if diff:
            findings.append(
                LogFinding(
                    kind=FindingKind.SUMMARY_COUNTS,
                    detail="pytest's final line and its summary's lines disagree: "
                    + ", ".join(f"{k} {a} counted vs {b} listed" for k, (a, b) in sorted(diff.items())),
                )
            )
    elif found and any(counts.get(k) for k in ("passed", "failed", "errors", "xfailed", "xpassed")):
        findings.append(
            LogFinding(
                kind=FindingKind.SUMMARY_COUNTS,
                detail="status lines and a final line, but no 'short test summary info' header of pytest's",
            )
        )
    failures = (
        counts.get("failed", 0) + counts.get("errors", 0) + sum(1 for s in block if s.status in FAILURE)
    )
    if exit_status == 0 and failures:
        findings.append(
            LogFinding(
                kind=FindingKind.EXIT_STATUS,
                detail=f"pytest exited 0 but reported {failures} failure(s)/error(s)",
            )
        )
    elif exit_status is not None and exit_status != 0 and expect_failures and not failures:
        findings.append(
            LogFinding(
                kind=FindingKind.EXIT_STATUS,
                detail=f"pytest exited {exit_status} (tests failed) but its report shows no failure, "
                "though the grader's must-fail tests ran",
            )
        )
    return findings
