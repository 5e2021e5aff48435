"""The test runner checks itself in Go, JavaScript and Rust runs (issue 48 item 1, beside `runner.guard`).

`runner.guard` records pytest's and unittest's machinery from a plugin loaded before any package code and
checks it during the run. ``go test``, ``node --test`` and ``cargo test`` have no plugin, but each lets
the grader put code of its own into the test run itself (no extra exec):

- **node**: a preload (``NODE_OPTIONS=--require``, exported right before the test command: every node
  process of the run loads it before any code of the package) records ``assert``/``assert.strict``'s
  functions, ``node:test``'s exports (in test-file processes) and the module loader's hooks
  (``Module._load``, ``_resolveFilename``, ``_extensions``, ``prototype.require``/``_compile``, ``register``).
  Each becomes an accessor: an assignment by any route (``require(name)`` of a computed name, a helper's
  result, ``Object.assign``) is reported **when it happens**, with the file that made it, so a change
  undone before the end is still seen; at exit it checks each is still its accessor and value, and that
  ``require('assert')`` still gives the module it recorded. A test-file or runner process that never
  reached its exit handler (killed itself, ``process.reallyExit``) voids too.
- **go**: the Go canary file (`canaries.languages`, compiled into the test binary) carries a check run
  at its ``init`` and in its must-pass canaries (the package's last tests): no ancestor process runs the
  same binary (a re-exec'd test binary: ``os.Args[0]``, ``/proc/self/exe``, or a copy, by content; voids
  when seen at a canary, i.e. the suite re-run, and is noted when seen only at ``init``: Go's
  ``TestHelperProcess`` idiom re-runs the binary for one helper test), and
  the binary's fd 1 / fd 2 are what ``go test`` gave it (``os.Stdout`` is fd 1, no pipe behind fd 1 or
  fd 2 is read by the binary itself: an in-process filter of the ``--- FAIL`` lines).
- **cargo**: a runner script (``CARGO_TARGET_<triple>_RUNNER``) runs each test binary: first libtest's
  own ``--list`` (which runs no test code), then the run, its stdout kept. libtest's report must appear
  once per binary and agree with the list: ``running N tests`` with N listed, one result line per listed
  test and none for a test the binary does not list, a ``test result`` line whose counts add up to N.
  A test binary re-run by the code under test prints a second report; forged ``ok`` lines name tests
  twice.

Every process appends to one report file (``guard`` in the probe's folder), read once after the run.
Limits, as for pytest: the code runs in the process it checks, so code that finds it can read it and
write the report's lines itself (the capability scan flags the reach: ``assert_patch``,
``rerun_binary``...); a change whose value is the same function is not a change; for cargo, a forger
that only flips ``FAILED`` to ``ok`` in place keeps the report consistent (the twins see that).
"""

from __future__ import annotations

import json
import re
import shlex

from swe_rl.grading.integrity import TamperRecord
from swe_rl.grading.runner.machinery_sources import CARGO_RUNNER, NODE_GUARD

__all__ = ["guard_lines", "machinery_records"]

MAX_RECORDS = 20
_TRIPLES = ("X86_64_UNKNOWN_LINUX_GNU", "AARCH64_UNKNOWN_LINUX_GNU", "X86_64_UNKNOWN_LINUX_MUSL")


def guard_lines(language: str, folder: str, report: str, tag: str) -> list[str]:
    """Shell lines, run right before the test command, that put the grader's check into the run
    (Go's lives in the canary file: none here)."""
    if language == "javascript":
        path, delimiter = f"{folder}/guard.cjs", f"EOF_SWE_GUARD_{tag}"
        source = NODE_GUARD.replace("__REPORT__", json.dumps(report))
        return [
            f"cat > {shlex.quote(path)} <<'{delimiter}'",
            source.rstrip("\n"),
            delimiter,
            f'export NODE_OPTIONS="--require {path}${{NODE_OPTIONS:+ $NODE_OPTIONS}}"',
        ]
    if language == "rust":
        path, delimiter = f"{folder}/runner.sh", f"EOF_SWE_GUARD_{tag}"
        source = CARGO_RUNNER.replace("__REPORT__", shlex.quote(report))
        exports = " ".join(f"CARGO_TARGET_{t}_RUNNER={path}" for t in _TRIPLES)
        return [
            f"cat > {shlex.quote(path)} <<'{delimiter}'",
            source.rstrip("\n"),
            delimiter,
            f"chmod +x {shlex.quote(path)}",
            f"export {exports}",
        ]
    return []


def _record(action: str, reason: str, path: str = "") -> TamperRecord:
    return TamperRecord(path=path, rule="runner_probe", action=action, reason=reason)


# -------------------------------------------------------------------------------------------------- node


def _by_whom(by: str, state: str, workdir: str, changed: set[str]) -> tuple[str, str]:
    """(action, words) for an assignment made from file `by` (`state`: ``written`` during the run, or
    ``gone`` by the time of the assignment's report)."""
    root = workdir.rstrip("/") + "/"
    if by and state in ("written", "gone"):
        return "voided", f"by {by}, a file {state} during the run (no scan read it)"
    if by.startswith(root) and "/node_modules/" not in by[len(root) - 1 :]:
        rel = by[len(root) :]
        if rel in changed:
            return "voided", f"by {rel}, a file the patch changed"
        return "noted", f"by {rel}, a file of the repository the patch left as it was"
    if by:
        return "noted", f"by {by}, installed code"
    return "voided", "by code with no file (eval, a Function built at run time)"


def _node_records(text: str, workdir: str, changed: set[str]) -> list[TamperRecord]:
    out: list[TamperRecord] = []
    kinds: dict[str, str] = {}
    ended: set[str] = set()
    last_set: dict[tuple[str, str], tuple[str, str]] = {}
    for row in text.splitlines():
        pid, _, rest = row.partition(" ")
        event, _, detail = rest.partition(" ")
        try:
            data = json.loads(detail)
        except ValueError:
            out.append(_record("voided", f"node's guard report has a line it never writes: {row[:200]!r}"))
            continue
        if not isinstance(data, dict):
            continue
        name = str(data.get("name", ""))
        if event == "start":
            kinds[pid] = str(data.get("kind", ""))
        elif event == "end":
            ended.add(pid)
        elif event == "set":
            action, words = _by_whom(str(data.get("by", "")), str(data.get("state", "")), workdir, changed)
            last_set[(pid, name)] = (action, words)
            out.append(
                _record(action, f"node's test machinery changed during the run: {name} assigned {words}")
            )
        elif event == "changed":
            how = str(data.get("how", ""))
            if how == "replaced" and (pid, name) in last_set:
                continue  # judged at its assignment
            out.append(_record("voided", f"node's test machinery changed during the run: {name} {how}"))
    for pid, kind in kinds.items():
        if kind in ("runner", "test-file") and pid not in ended:
            out.append(
                _record(
                    "voided",
                    f"a node {kind} process ({pid}) never reached its exit handler (killed itself, "
                    "or exited around node's own exit path)",
                )
            )
    return out


# ---------------------------------------------------------------------------------------------------- go


def _go_records(text: str) -> list[TamperRecord]:
    out = []
    for row in text.splitlines():
        pid, _, rest = row.partition(" ")
        event, _, detail = rest.partition(" ")
        if event == "changed":
            try:
                words = str(json.loads(detail))
            except ValueError:
                words = detail
            # a child re-run for one helper test (Go's TestHelperProcess idiom: ``-test.run``, its output
            # read by the test that started it) never reaches the canaries; a re-run of the suite does
            helper = words.startswith("init: ") and words.endswith("re-executed")
            action = "noted" if helper else "voided"
            out.append(_record(action, f"the go test binary ({pid}): {words}"))
        elif event not in ("start", "ok"):
            out.append(_record("voided", f"the go guard's report has a line it never writes: {row[:200]!r}"))
    return out


# -------------------------------------------------------------------------------------------------- rust

_LISTED = re.compile(r"^(.*): (?:test|benchmark|bench)$")
_RUNNING = re.compile(r"^running (\d+) tests?$")
_RESULT = re.compile(r"^test (\S+)(?: - should panic)? \.\.\. ")
_SUMMARY = re.compile(
    r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; \d+ filtered out"
)


def _binaries(text: str) -> list[dict]:
    """The report's sections: per test binary, its header, libtest's list and the run."""
    out: list[dict] = []
    current: dict | None = None
    part = ""
    for row in text.splitlines():
        if row.startswith("### binary "):
            pid, _, args = row[len("### binary ") :].partition(" ")
            current = {"pid": pid, "args": args, "list": [], "run": None, "rc": None}
            out.append(current)
            part = "list"
        elif row.startswith("### run ") and current is not None:
            pid, _, rc = row[len("### run ") :].partition(" ")
            current["run"], current["rc"], part = [], rc.strip(), "run"
        elif row.startswith("|") and current is not None and current[part] is not None:
            current[part].append(row[2:])
    return out


def _libtest_problems(binary: dict) -> list[str]:
    name = binary["args"].split(" ")[0].rsplit("/", 1)[-1]
    if binary["list"] == ["<no libtest>"]:
        return []
    if binary["run"] is None:
        return [f"{name}: the run of the test binary was never recorded"]
    listed = [m.group(1) for line in binary["list"] if (m := _LISTED.match(line))]
    run: list[str] = binary["run"]
    running = [int(m.group(1)) for line in run if (m := _RUNNING.match(line))]
    summaries = [m for line in run if (m := _SUMMARY.match(line))]
    problems = []
    if len(running) != 1 or len(summaries) > 1:
        if running or binary["rc"] == "0":
            problems.append(
                f"{name}: libtest's report appears {len(running)} times in one run of the binary "
                f"({len(summaries)} summaries)"
            )
        return problems
    if running[0] != len(listed):
        problems.append(f"{name}: libtest reports running {running[0]} tests, the binary lists {len(listed)}")
    if summaries:
        total = sum(int(n) for n in summaries[0].groups())
        if total != running[0]:
            problems.append(f"{name}: the summary counts {total} tests of the {running[0]} run")
    args = binary["args"].split(" ")
    if any(a in ("-q", "--quiet") or a.startswith("--format") for a in args):
        return problems
    reported: list[str] = []
    for line in run[run.index(next(line for line in run if _RUNNING.match(line))) :]:
        if line == "failures:" or line.startswith("test result: "):
            break
        if m := _RESULT.match(line):
            reported.append(m.group(1))
    known = set(listed)
    unknown = sorted({t for t in reported if t not in known})
    twice = sorted({t for t in reported if reported.count(t) > 1})
    if unknown:
        problems.append(f"{name}: results for tests the binary does not list: {unknown[:5]}")
    if twice:
        problems.append(f"{name}: tests reported more than once: {twice[:5]}")
    missing = sorted(known - set(reported))
    if missing and binary["rc"] == "0":
        problems.append(f"{name}: listed tests with no result line in a run that passed: {missing[:5]}")
    return problems


def _rust_records(text: str) -> list[TamperRecord]:
    out = []
    for binary in _binaries(text):
        out += [
            _record("voided", f"libtest's report does not hold together: {p}")
            for p in _libtest_problems(binary)
        ]
    return out


def machinery_records(
    language: str, text: str | None, workdir: str, changed: set[str], expected: bool = True
) -> list[TamperRecord]:
    """The grader's checks inside the run, judged (`text`: the report; None: no file). `changed`: the
    paths (relative to `workdir`) the graded patch changed; `expected`: the run was to write a report."""
    if text is None:
        if not expected:
            return []
        return [_record("noted", f"no {language} guard report (no test process of the run loaded it)")]
    if language == "javascript":
        out = _node_records(text, workdir, changed)
    elif language == "go":
        out = _go_records(text)
    else:
        out = _rust_records(text)
    return list({(r.action, r.reason): r for r in out}.values())[:MAX_RECORDS]
