"""Canary tests and nonce markers in the grading run (stage 4 of the grading pipeline).

`plan_canaries` rewrites the instance's eval script (SWE-bench's shape: reset the test files, apply
the test patch, ``: '>>>>> Start Test Output'``, the test command, ``: '>>>>> End Test Output'``,
reset again):

- **canaries**: right before the test command the script writes a test file of the grader's own,
  ``test_<w>_<w>_<w>.py`` next to the task's first test file, holding one ``unittest.TestCase`` with
  two tests that must pass and two that must fail (random names and values per run; a TestCase is
  collected whatever the repo's ``python_classes``/``python_functions``). A command naming files gets
  the canary file as one more argument; one naming a directory collects it. It is in no patch and
  is removed after the run. A forging layer turning failures into passes flips a must-fail canary;
  one hiding or dropping results loses a must-pass one. Runners other than pytest (Django's
  ``runtests.py``, sympy's ``bin/test``, tox) and commands that select or stop early (``-k``, ``-m``,
  ``-x``, ``--maxfail``, ``--lf``, ...) get no canaries: `CanaryPlan.skipped` says why.
- **nonce markers**: the test command runs between ``RUN_START_MARKER <token>`` and
  ``RUN_END_MARKER <nonce> exit <status>``, printed on stdout and stderr (a runner writing its results
  to stderr, as Django's, stays inside) by the runner shell with tracing off, the end one only after the test command returned and every process it left
  behind was killed. The nonce is in no environment, command line or file the tests can read: the
  whole script is one ``{ ...; }`` group that bash parses before running it, and the script file is
  emptied and removed before the tests start. The start token is a one-way hash of the nonce.

`check_canaries` reads the run's log: only the nonce section counts; every canary must come out as
planted; pytest's report must hold together (`swe_rl.grading.canaries.log_audit.audit_pytest_log`).
"""

from __future__ import annotations

import posixpath
import random
import shlex

from pydantic import BaseModel, Field

from swe_rl.grading.canaries.log_audit import (
    SUCCESS,
    FindingKind,
    LogFinding,
    NonceSection,
    audit_pytest_log,
    nonce_section,
    start_token,
    status_lines,
)
from swe_rl.grading.integrity import TamperRecord, patch_paths
from swe_rl.grading.parsers.rust import libtest_failures
from swe_rl.grading.runner.command import read_runner_command
from swe_rl.tasks import TaskInstance
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, RUN_END_MARKER, RUN_START_MARKER, START_TEST_OUTPUT

__all__ = ["CanaryCheck", "CanaryPlan", "check_canaries", "plan_canaries", "without_canaries"]


class CanaryPlan(BaseModel):
    """What one grading run plants: the instrumented eval script and the canaries' expected outcomes."""

    script: str
    """The eval script to run instead of the instance's (canaries planted after the test patch)."""
    nonce: str = ""
    """Per-run token in the start/end markers of the test output ("" = the standard markers)."""
    must_pass: list[str] = Field(default_factory=list)
    """Test ids (as the log parser reports them) that must be reported passed."""
    must_fail: list[str] = Field(default_factory=list)
    """Test ids that must be reported failed."""
    canary_file: str = ""
    """Where the script writes the canaries (relative to the workdir); "" when none are planted."""
    canary_source: str = ""
    """What it writes there (a ``unittest.TestCase``)."""
    append_block: str = ""
    """Rust and JavaScript: the canaries go at the end of a test file of the test patch (`canary_file`),
    not in a file of their own (a new file under ``tests/`` is one more test binary to compile and link:
    about 1 s of a 2 s cargo run; a new test file is one more node process of node's runner, ~0.15 s).
    These lines append them when they are not there yet; the twins (`twins.plant.plant_twins`) run them
    again after rewriting that file and after its compile check."""
    runner: str = ""
    """``pytest`` when the test command is a plain pytest call (its report is audited), else the
    command's first word ("" when the script has no test-output markers)."""
    capture: bool = True
    """pytest captures the tests' output (no ``-s``): status lines among its progress lines are forged."""
    skipped: str = ""
    """Why no canaries were planted ("" when they were)."""
    command_env: str = ""
    """Go: the assignments the test command starts with, as a shell prefix (``GO111MODULE=off ``), for
    the grader's own ``go`` commands of the run (`languages.go_command_env`)."""


class CanaryCheck(BaseModel):
    """The canaries' outcome in one run."""

    tripped: bool = False
    """Some finding is evidence of forging: the reward is void."""
    reasons: list[str] = Field(default_factory=list)
    """The tampering findings, in words."""
    findings: list[LogFinding] = Field(default_factory=list)
    """Everything found, notes (``tamper=False``) included."""

    def tamper_records(self) -> list[TamperRecord]:
        """The tampering findings as the integrity report's records (action ``flagged``: voiding)."""
        return [
            TamperRecord(
                path=", ".join(f.tests[:5]) or "(test log)",
                rule=f.kind.value,
                action="flagged",
                reason=f.detail,
            )
            for f in self.findings
            if f.tamper
        ]


# ----------------------------------------------------------------------------- the test command

_WORDS = (
    "anchor buffer bundle cache column cursor default edge empty encoder field filter format group handle "
    "header index large layout limit locale mapping marker matrix merge mixed negative nested number offset "
    "option order ordered parser partial policy prefix range record result reverse scale schema sequence "
    "signal simple single small socket sorted split stream string suffix thread token unicode unique value "
    "vector window zero"
).split()
# ----------------------------------------------------------------------------- planting

_CANARY_FILE = """import unittest


class {cls}(unittest.TestCase):
    def {p1}(self):
        self.assertEqual({a} + {b}, {ab})

    def {f1}(self):
        self.assertEqual({c} * {d}, {cd_wrong})

    def {p2}(self):
        self.assertTrue({c} < {d})

    def {f2}(self):
        self.assertIn({a}, [{b}, {ab}])
"""


def _relative(path: str, workdir: str) -> str:
    path = path.split("::", 1)[0]
    if path.startswith(workdir.rstrip("/") + "/"):
        path = path[len(workdir.rstrip("/")) + 1 :]
    path = posixpath.normpath(path)
    return "" if path == "." else path


def _canary_dir(path: str, test_files: list[str]) -> tuple[str, str, bool]:
    """(directory of the canary file, the task's test file it sits beside, whether the command must
    name it) for the command's first path argument (relative to the workdir)."""
    if path.endswith(".py"):
        return posixpath.dirname(path), path, True
    inside = [f for f in test_files if not path or f.startswith(path + "/")]
    return (posixpath.dirname(inside[0]) if inside else path), (inside[0] if inside else ""), False


def _id_dir(canary_dir: str, beside: str, expected: list[str]) -> str:
    """The canary file's directory as the run's test ids spell it (relative to pytest's rootdir, which
    may be below the workdir): read off an expected test of the file it sits beside."""
    for test in expected:
        file_part = test.split("::", 1)[0]
        if "::" not in test or not beside:
            continue
        if file_part == beside:
            return canary_dir
        if beside.endswith("/" + file_part):
            return posixpath.dirname(file_part)
    return canary_dir


def plan_canaries(instance: TaskInstance, script: str, rng: random.Random | None = None) -> CanaryPlan:
    """Plant canaries in `script` (the instance's eval script) and put nonce markers around its tests.

    Scripts without SWE-bench's test-output markers, and instances graded without test lists
    (exit code, R2E-Gym's exact expected statuses), are returned unchanged (`CanaryPlan.skipped`)."""
    rng = rng or random.SystemRandom()
    lines = script.split("\n")
    starts = [i for i, line in enumerate(lines) if START_TEST_OUTPUT in line]
    ends = [i for i, line in enumerate(lines) if END_TEST_OUTPUT in line and starts and i > starts[0]]
    if not instance.has_test_lists:
        return CanaryPlan(script=script, skipped="no FAIL_TO_PASS/PASS_TO_PASS lists (graded otherwise)")
    if len(starts) != 1 or not ends:
        return CanaryPlan(script=script, skipped="the script has no single pair of test-output markers")
    start, end = starts[0], ends[0]
    command = read_runner_command(lines[start + 1 : end])
    nonce = f"{rng.getrandbits(128):032x}"
    plan = CanaryPlan(script="", nonce=nonce, runner=command.runner, capture=command.capture)
    test_files = [p for p in patch_paths(instance.test_patch) if p.endswith(".py")]
    if command.refused:
        plan.skipped = command.refused
    elif not command.paths and not test_files:
        plan.skipped = "the test command names no tests and the test patch has no Python file"
    run_lines = lines[start + 1 : end]
    plant: list[str] = []
    if not plan.skipped:
        first = _relative(command.paths[0], instance.workdir) if command.paths else test_files[0]
        folder, beside, named = _canary_dir(first, test_files)
        words = rng.sample(_WORDS, 11)
        name = f"test_{words[0]}_{words[1]}_{words[2]}.py"
        plan.canary_file = posixpath.join(folder, name)
        cls = "Test" + words[3].capitalize() + words[4].capitalize()
        p1, p2, f1, f2 = (f"test_{words[5 + k]}_{words[6 + k]}" for k in (0, 1, 2, 4))
        # b and d are drawn above a and c: with two equal draws `a in [b, a + b]` would pass
        a, c = rng.randint(2, 999), rng.randint(2, 999)
        b, d = a + rng.randint(1, 999), c + rng.randint(1, 999)
        body = _CANARY_FILE.format(
            cls=cls,
            p1=p1,
            p2=p2,
            f1=f1,
            f2=f2,
            a=a,
            b=b,
            ab=a + b,
            c=c,
            d=d,
            cd_wrong=c * d + rng.randint(1, 9),
        )
        prefix = posixpath.join(_id_dir(folder, beside, instance.fail_to_pass + instance.pass_to_pass), name)
        plan.must_pass = [f"{prefix}::{cls}::{m}" for m in (p1, p2)]
        plan.must_fail = [f"{prefix}::{cls}::{m}" for m in (f1, f2)]
        delimiter = f"EOF_SWE_CANARY_{rng.getrandbits(64):016x}"
        quoted = shlex.quote(plan.canary_file)
        plan.canary_source = body
        plant = [f"[ -e {quoted} ] || cat > {quoted} <<'{delimiter}'", body.rstrip("\n"), delimiter]
        if named:
            run_lines = [line for line in run_lines if line.strip()]
            run_lines[-1] = f"{run_lines[-1].rstrip()} {quoted}"
    hide = (
        '__swe_self=${BASH_SOURCE[0]:-}; if [ -n "$__swe_self" ] && [ -f "$__swe_self" ]; then '
        ': > "$__swe_self"; rm -f -- "$__swe_self"; fi'
    )
    quiet, loud = "{ set +x; } 2>/dev/null", 'case "$__swe_flags" in *x*) set -x ;; esac'
    # Processes that were there before the tests (the container's init and keep-alive) are spared;
    # whatever the test command left behind (daemons, double forks) dies before the end marker. Only
    # where the shell was entered into the container from outside (docker exec: its topmost ancestor
    # has parent 0 and is not PID 1), never on a host, where new processes are not the test's.
    inside = (
        '__swe_kill=0; __swe_p=$$; while read -r __swe_st < "/proc/$__swe_p/stat"; do '
        "__swe_st=${__swe_st##*) }; __swe_pp=${__swe_st#* }; __swe_pp=${__swe_pp%% *}; "
        'if [ "$__swe_pp" = 0 ]; then [ "$__swe_p" = 1 ] || __swe_kill=1; break; fi; __swe_p=$__swe_pp; done'
    )
    before = (
        '__swe_pids=" "; for __swe_p in /proc/[0-9]*; do __swe_pids="$__swe_pids${__swe_p#/proc/} "; done'
    )
    kill_left = (
        'if [ "$__swe_kill" = 1 ]; then for __swe_p in /proc/[0-9]*; do __swe_p=${__swe_p#/proc/}; '
        'case "$__swe_pids" in *" $__swe_p "*) ;; *) [ "$__swe_p" = "$$" ] || kill -9 "$__swe_p" 2>/dev/null ;; '
        "esac; done; fi"
    )
    run = "{\n" + "\n".join(run_lines) + "\n} && __swe_rc=0 || __swe_rc=$?"
    instrumented = [
        *plant,
        hide,
        lines[start],
        "__swe_flags=$-",
        quiet,
        inside,
        before,
        f"__swe_m='{RUN_START_MARKER} {start_token(nonce)}'; printf '%s\\n' \"$__swe_m\"; printf '%s\\n' \"$__swe_m\" >&2",
        loud,
        run,
        quiet,
        kill_left,
        kill_left,
        f'__swe_m="{RUN_END_MARKER} {nonce} exit $__swe_rc"; printf \'%s\\n\' "$__swe_m"; printf \'%s\\n\' "$__swe_m" >&2',
        loud,
        *([f"rm -f {shlex.quote(plan.canary_file)}"] if plan.canary_file else []),
        lines[end],
    ]
    head = lines[:1] if lines[0].startswith("#!") else []
    body_lines = [*lines[len(head) : start], *instrumented, *lines[end + 1 :]]
    while body_lines and not body_lines[-1].strip():
        body_lines.pop()
    plan.script = "\n".join([*head, "{", *body_lines, "}"]) + "\n"
    return plan


# ----------------------------------------------------------------------------- checking


def _canary_findings(plan: CanaryPlan, section: str, statuses: dict[str, str]) -> list[LogFinding]:
    seen: dict[str, set[str]] = {}
    for line in status_lines(section):
        if line.form == "trailing":
            continue
        for test in plan.must_pass + plan.must_fail:
            tail = test.rsplit("/", 1)[-1]
            if line.test in (test, tail) or line.test.endswith("/" + tail):
                seen.setdefault(test, set()).add(line.status)
    for test, status in statuses.items():
        for canary in plan.must_pass + plan.must_fail:
            if test == canary:
                seen.setdefault(canary, set()).add(status)
    any_results = bool(status_lines(section)) or bool(statuses)  # other languages: their parser's
    out: list[LogFinding] = []
    for test in plan.must_fail:
        got = seen.get(test, set())
        if got & SUCCESS:
            out.append(
                LogFinding(
                    kind=FindingKind.CANARY_PASSED,
                    detail=f"a canary that must fail was reported {'/'.join(sorted(got))}: {test}",
                    tests=[test],
                )
            )
        elif not got:
            out.append(
                LogFinding(
                    kind=FindingKind.CANARY_MISSING,
                    detail=f"a canary that must fail was not reported: {test}",
                    tests=[test],
                    tamper=any_results,
                )
            )
    for test in plan.must_pass:
        got = seen.get(test, set())
        if not got:
            out.append(
                LogFinding(
                    kind=FindingKind.CANARY_MISSING,
                    detail=f"a canary that must pass was not reported: {test}",
                    tests=[test],
                    tamper=any_results,
                )
            )
        elif got != {"PASSED"}:
            out.append(
                LogFinding(
                    kind=FindingKind.CANARY_NOT_PASSED,
                    detail=f"a canary that must pass was reported {'/'.join(sorted(got))}: {test}",
                    tests=[test],
                )
            )
    return out


def check_canaries(plan: CanaryPlan, statuses: dict[str, str], test_log: str) -> CanaryCheck:
    """Did every canary come out as planted? `statuses` = the parsed test -> status map of the run."""
    if not plan.nonce:
        return CanaryCheck()
    section = nonce_section(test_log, plan.nonce)
    if not isinstance(section, NonceSection):
        return CanaryCheck(
            tripped=section.tamper, reasons=[section.detail] if section.tamper else [], findings=[section]
        )
    findings: list[LogFinding] = []
    if plan.runner == "pytest":
        findings += audit_pytest_log(
            section.text,
            exit_status=section.exit_status,
            expect_failures=bool(plan.must_fail),
            captured=plan.capture,
        )
    # a failure whose result line interleaved with cargo's stderr is still listed by libtest: not missing
    listed = {t: s for t, s in libtest_failures(section.text).items() if t in plan.must_fail}
    findings += _canary_findings(plan, section.text, {**listed, **statuses})
    bad = [f for f in findings if f.tamper]
    return CanaryCheck(tripped=bool(bad), reasons=[f.detail for f in bad], findings=findings)


def without_canaries(plan: CanaryPlan, statuses: dict[str, str]) -> dict[str, str]:
    """The run's statuses without the canaries' own: they are the grader's, not the task's (random names
    per run would otherwise look like tests that come and go, e.g. to certification's flaky-test check)."""
    if not plan.canary_file:
        return statuses
    planted = {*plan.must_pass, *plan.must_fail}
    if plan.append_block:  # appended to a test file of the task's: its own tests name that file too
        return {t: s for t, s in statuses.items() if t not in planted}
    name = posixpath.basename(plan.canary_file)
    return {t: s for t, s in statuses.items() if t not in planted and name not in t}
