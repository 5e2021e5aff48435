"""SWE-bench grading of one patch from its test log: parse the log, judge FAIL_TO_PASS / PASS_TO_PASS.

The reward is SWE-bench's `resolved`, so the parsing and the decision are delegated to
the official ``swebench`` package (``eval`` extra, imported lazily) whenever it is
installed. A small built-in ``pytest -rA`` parser, with the same semantics as the
pinned release, keeps grading working without it for pytest-based repos (our
fixtures, SWE-Gym); repos that need another official parser get ``env_error`` rather
than a wrong score. Statuses that are not the agent's doing (``env_error``) are
separate, so the caller can drop those samples instead of punishing them.
"""

from __future__ import annotations

import re
from typing import Protocol

from swe_rl.grading.integrity import strict_report
from swe_rl.grading.languages import language_contradictions, row_parser
from swe_rl.grading.log_audit import NonceSection, nonce_section
from swe_rl.grading.result import ApplyStatus, GradeResult, GradeStatus, TestsReport
from swe_rl.tasks import END_TEST_OUTPUT, START_TEST_OUTPUT, TaskInstance

__all__ = [
    "BuiltinPytestGrader",
    "GraderUnavailable",
    "LogGrader",
    "SwebenchGrader",
    "default_grader",
    "grade",
    "parse_pytest_log",
]


# ---------------------------------------------------------------------------- graders

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
_STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)


class LogGrader(Protocol):
    """Turns a test log into statuses and decides FAIL_TO_PASS / PASS_TO_PASS."""

    kind: str
    """Prefix of `GradeResult.method`, e.g. ``swebench-log-parser``."""

    def parse(self, log: str, instance: TaskInstance) -> tuple[str, dict[str, str]]:
        """Return (parser name, test -> status) for the instance's repo."""
        ...

    def pytest_parse(self, log: str, instance: TaskInstance) -> dict[str, str]:
        """Parse with the plain pytest parser whatever the repo (for R2E-Gym)."""
        ...

    def report(
        self, status_map: dict[str, str], instance: TaskInstance
    ) -> tuple[TestsReport, TestsReport, bool]:
        """Return (FAIL_TO_PASS report, PASS_TO_PASS report, resolved)."""
        ...


def parse_pytest_log(log: str) -> dict[str, str]:
    """Parse ``pytest -rA`` summary lines (``STATUS test_id [- reason]``) into test -> status.

    Same rules as swebench's ``parse_log_pytest``: the test id is the second
    whitespace-separated token, so ids containing spaces are cut at the first space
    (SWE-bench's test lists carry the same cut ids), and a later line for a test wins.
    """
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        if not line.startswith(_STATUSES):
            continue
        if line.startswith(FAILED):
            line = line.replace(" - ", " ")
        tokens = line.split()
        if len(tokens) >= 2:
            statuses[tokens[1]] = tokens[0]
    return statuses


# Repos whose official parser is not the plain pytest one; the built-in grader refuses
# them rather than mis-score (install the eval extra).
NEEDS_OFFICIAL_PARSER = frozenset(
    {
        "astropy/astropy", "django/django", "matplotlib/matplotlib", "mwaskom/seaborn",
        "psf/requests", "pydicom/pydicom", "pylint-dev/pylint", "scikit-learn/scikit-learn",
        "sphinx-doc/sphinx", "sympy/sympy",
    }
)  # fmt: skip


class GraderUnavailable(RuntimeError):
    """This grader cannot grade this repo correctly."""


class BuiltinPytestGrader:
    """pytest ``-rA`` parsing and SWE-bench's decision rules, without the swebench package."""

    kind = "builtin-log-parser"

    def parse(self, log: str, instance: TaskInstance) -> tuple[str, dict[str, str]]:
        if (named := row_parser(instance)) is not None:  # a Go, JavaScript, Rust... row
            return named[0], named[1](log)
        if instance.repo in NEEDS_OFFICIAL_PARSER:
            raise GraderUnavailable(
                f"{instance.repo} logs need swebench's own parser; pip install 'swe-rl[eval]'"
            )
        return "parse_log_pytest", parse_pytest_log(log)

    def pytest_parse(self, log: str, instance: TaskInstance) -> dict[str, str]:
        return parse_pytest_log(log)

    def report(
        self, status_map: dict[str, str], instance: TaskInstance
    ) -> tuple[TestsReport, TestsReport, bool]:
        # As swebench 4.1: PASSED/XFAIL is success; FAILED/ERROR or absent is failure;
        # anything else (SKIPPED) is neither. A list with nothing judged counts as met.
        def split(tests: list[str]) -> TestsReport:
            rep = TestsReport()
            for test in tests:
                status = status_map.get(test)
                if status in (PASSED, XFAIL):
                    rep.success.append(test)
                elif status is None or status in (FAILED, ERROR):
                    rep.failure.append(test)
            return rep

        f2p, p2p = split(instance.fail_to_pass), split(instance.pass_to_pass)
        return f2p, p2p, not f2p.failure and not p2p.failure


class SwebenchGrader:
    """The official swebench parsers and report functions (imported on construction)."""

    kind = "swebench-log-parser"

    def __init__(self) -> None:
        from swebench.harness import constants, grading

        try:
            from swebench.harness.log_parsers import MAP_REPO_TO_PARSER as parsers
        except ImportError:  # swebench >= 5 keys parsers by name; keep the Python map
            from swebench.harness.log_parsers.python import (
                MAP_REPO_TO_PARSER_PY as parsers,
            )
        from swebench.harness.log_parsers.python import parse_log_pytest

        self._c, self._g, self._parsers, self._pytest = constants, grading, parsers, parse_log_pytest

    def _spec(self, instance: TaskInstance):
        """A TestSpec for parsers that read it (a few use ``instance_id``)."""
        try:
            from swebench.harness.test_spec.test_spec import TestSpec

            return TestSpec(
                instance_id=instance.instance_id, repo=instance.repo, version=instance.version,
                repo_script_list=[], eval_script_list=[], env_script_list=[], arch="x86_64",
                FAIL_TO_PASS=list(instance.fail_to_pass), PASS_TO_PASS=list(instance.pass_to_pass),
                language=self._c.MAP_REPO_TO_EXT.get(instance.repo, "py"), docker_specs={},
                namespace=None,
            )  # fmt: skip
        except (ImportError, TypeError, AttributeError):
            from types import SimpleNamespace

            return SimpleNamespace(
                instance_id=instance.instance_id, repo=instance.repo, version=instance.version,
                FAIL_TO_PASS=list(instance.fail_to_pass), PASS_TO_PASS=list(instance.pass_to_pass),
            )  # fmt: skip

    def parse(self, log: str, instance: TaskInstance) -> tuple[str, dict[str, str]]:
        if (named := row_parser(instance)) is not None:  # 4.1's map knows no row parser names
            return named[0], named[1](log)
        parser = self._parsers.get(instance.repo, self._pytest)
        return parser.__name__, parser(log, self._spec(instance))

    def pytest_parse(self, log: str, instance: TaskInstance) -> dict[str, str]:
        return self._pytest(log, self._spec(instance))

    def report(
        self, status_map: dict[str, str], instance: TaskInstance
    ) -> tuple[TestsReport, TestsReport, bool]:
        c, g = self._c, self._g
        fail_only = instance.repo in getattr(c, "FAIL_ONLY_REPOS", ())
        eval_type = c.EvalType.FAIL_ONLY if fail_only else c.EvalType.PASS_AND_FAIL
        gold = {
            "instance_id": instance.instance_id,
            c.FAIL_TO_PASS: list(instance.fail_to_pass),
            c.PASS_TO_PASS: list(instance.pass_to_pass),
        }
        rep = g.get_eval_tests_report(status_map, gold, eval_type=eval_type)
        resolved = g.get_resolution_status(rep) == c.ResolvedStatus.FULL.value
        return TestsReport(**rep[c.FAIL_TO_PASS]), TestsReport(**rep[c.PASS_TO_PASS]), resolved


def default_grader() -> LogGrader:
    """The official grader when swebench is importable, else the built-in one."""
    try:
        return SwebenchGrader()
    except ImportError:
        return BuiltinPytestGrader()


# ---------------------------------------------------------------------------- grade


def _test_output(log: str) -> str:
    """The part between SWE-bench's start/end markers, or the whole log without them."""
    if START_TEST_OUTPUT not in log:
        return log
    return log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _r2e_key(test_id: str) -> str:
    """R2E-Gym names a test by its node id without the file (``Class.test``), sans reason."""
    return _ANSI.sub("", ".".join(test_id.split("::")[1:]).split(" - ")[0])


def _grade_r2e(instance: TaskInstance, log: str, grader: LogGrader) -> GradeResult:
    # R2E-Gym's rule: the run's test -> status map equals the expected one exactly.
    got = {_r2e_key(k): v for k, v in grader.pytest_parse(log, instance).items()}
    got.pop("", None)
    expected = {_ANSI.sub("", k.split(" - ")[0]): v for k, v in (instance.expected_statuses or {}).items()}
    expected.pop("", None)
    rep = TestsReport()
    for test, want in expected.items():
        (rep.success if got.get(test) == want else rep.failure).append(test)
    unexpected = sorted(set(got) - set(expected))
    resolved = not rep.failure and not unexpected
    msg = f"{len(rep.success)}/{len(expected)} expected statuses matched"
    if unexpected:
        msg += f"; {len(unexpected)} unexpected test(s), e.g. {unexpected[0]}"
    return GradeResult(
        instance_id=instance.instance_id,
        status=GradeStatus.RESOLVED if resolved else GradeStatus.UNRESOLVED,
        resolved=resolved, fail_to_pass=rep, tests_status=got,
        method=f"r2e-expected-output:{grader.kind}", message=msg,
    )  # fmt: skip


def grade(
    instance: TaskInstance,
    *,
    patch: str | None,
    apply_status: ApplyStatus | str | bool,
    test_log: str,
    timed_out: bool = False,
    returncode: int | None = None,
    env_error: str | None = None,
    grader: LogGrader | None = None,
    strict: bool = False,
    nonce: str = "",
) -> GradeResult:
    """Grade one patch from the outcome of its eval run.

    Order: no patch; an environment error (checked before apply/timeout so that a
    broken container is never blamed on the policy); patch did not apply; eval timed
    out; then the log: SWE-bench parsing and F2P/P2P when the instance has test
    lists, R2E-Gym's expected statuses when it has those, else the exit code.
    ``strict`` (integrity grading, `swe_rl.grading.integrity.strict_report`): an expected test
    that did not run, was skipped or contradicts itself in the log is a failure.
    ``nonce`` (a `swe_rl.grading.canaries.CanaryPlan`'s): only the section between the runner's nonce
    markers is read (none found: no results), never the rest of the log.
    """
    if isinstance(apply_status, bool):
        apply_status = ApplyStatus.APPLIED if apply_status else ApplyStatus.FAILED
    apply_status = ApplyStatus(apply_status)

    def done(status: GradeStatus, message: str, **kw) -> GradeResult:
        return GradeResult(
            instance_id=instance.instance_id, status=status,
            resolved=status is GradeStatus.RESOLVED, message=message, **kw,
        )  # fmt: skip

    if not patch or not patch.strip():
        return done(GradeStatus.NO_PATCH, "empty patch")
    if env_error:
        return done(GradeStatus.ENV_ERROR, env_error)
    if apply_status is ApplyStatus.FAILED:
        return done(GradeStatus.PATCH_APPLY_FAILED, "patch did not apply")
    if timed_out:
        return done(GradeStatus.EVAL_TIMEOUT, "tests did not finish in time")

    grader = grader or default_grader()
    if instance.has_test_lists:
        section = _test_output(test_log)
        if nonce:
            found = nonce_section(test_log, nonce)
            section = found.text if isinstance(found, NonceSection) else ""
        try:
            name, statuses = grader.parse(section, instance)
            if not statuses and START_TEST_OUTPUT in test_log and not nonce:
                # as swebench: results printed outside the markers (stderr ordering)
                name, statuses = grader.parse(test_log, instance)
        except GraderUnavailable as exc:
            return done(GradeStatus.ENV_ERROR, str(exc))
        f2p, p2p, resolved = grader.report(statuses, instance)
        strict_note = ""
        if strict:
            f_ok, f_bad, p_ok, p_bad, strict_note = strict_report(
                statuses, instance.fail_to_pass, instance.pass_to_pass, section,
                also_contradicted=language_contradictions(
                    instance, section, {*instance.fail_to_pass, *instance.pass_to_pass}
                ),
            )  # fmt: skip
            f2p, p2p = TestsReport(success=f_ok, failure=f_bad), TestsReport(success=p_ok, failure=p_bad)
            resolved = not f_bad and not p_bad
        n_f2p, n_p2p = len(instance.fail_to_pass), len(instance.pass_to_pass)
        msg = (
            f"FAIL_TO_PASS {len(f2p.success)}/{n_f2p} passed, PASS_TO_PASS {len(p2p.success)}/{n_p2p} passed"
        )
        if not statuses:
            msg += "; no test results found in the log"
        elif strict_note:
            msg += f"; {strict_note}"
        return done(
            GradeStatus.RESOLVED if resolved else GradeStatus.UNRESOLVED, msg,
            fail_to_pass=f2p, pass_to_pass=p2p, tests_status=statuses,
            method=f"{grader.kind}:{name}",
        )  # fmt: skip
    if instance.expected_statuses:
        return _grade_r2e(instance, _test_output(test_log), grader)
    if returncode is None:
        return done(GradeStatus.ENV_ERROR, "no test lists and no return code to grade by")
    status = GradeStatus.RESOLVED if returncode == 0 else GradeStatus.UNRESOLVED
    return done(status, f"no test lists; tests exited with {returncode}", method="exit-code")
