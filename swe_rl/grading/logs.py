"""SWE-bench grading of one patch from its test log: parse the log, judge FAIL_TO_PASS / PASS_TO_PASS.

The reward is SWE-bench's ``resolved`` as swebench 5.x decides it. The row names its log parser
and eval type (older rows: by repo, `swe_rl.tasks.specs`); the parsers are the project's own
(`swe_rl.grading.parsers`, keyed by 5.x's names) and the decision rules are 5.x's
(`swe_rl.grading.rules`), both checked equal to the installed swebench 5.x's functions
(tests/grading/test_official_5x.py). `SwebenchGrader` calls those functions directly.
Statuses that are not the agent's doing (``env_error``) are separate, so the caller can drop
those samples instead of punishing them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from swe_rl.grading import rules
from swe_rl.grading.canaries.log_audit import NonceSection, nonce_section
from swe_rl.grading.languages import language_contradictions
from swe_rl.grading.parsers import UnknownParser, parser_named
from swe_rl.grading.parsers.python import parse_log_pytest
from swe_rl.grading.result import ApplyStatus, GradeResult, GradeStatus, TestsReport
from swe_rl.grading.verdict.strict import strict_report
from swe_rl.tasks import END_TEST_OUTPUT, START_TEST_OUTPUT, TaskInstance
from swe_rl.tasks.specs import NoLogParser, eval_type_for, log_parser_for

__all__ = [
    "BuiltinGrader",
    "BuiltinPytestGrader",
    "GraderUnavailable",
    "LogGrader",
    "SwebenchGrader",
    "default_grader",
    "grade",
    "parse_pytest_log",
]


# ---------------------------------------------------------------------------- graders


class LogGrader(Protocol):
    """Turns a test log into statuses and decides FAIL_TO_PASS / PASS_TO_PASS."""

    kind: str
    """Prefix of `GradeResult.method`, e.g. ``builtin-log-parser``."""

    def parse(self, log: str, instance: TaskInstance) -> tuple[str, dict[str, str]]:
        """Return (parser name, test -> status) with the instance's parser."""
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
    """``pytest -rA`` summary lines into test -> status (swebench's ``parse_log_pytest``)."""
    return parse_log_pytest(log)


class GraderUnavailable(RuntimeError):
    """This grader cannot grade this instance correctly (no parser for its log)."""


class BuiltinGrader:
    """The project's parsers (by the row's ``log_parser``) and swebench 5.x's decision rules."""

    kind = "builtin-log-parser"

    def parse(self, log: str, instance: TaskInstance) -> tuple[str, dict[str, str]]:
        try:
            name = log_parser_for(instance)
            return name, parser_named(name)(log)
        except (NoLogParser, UnknownParser) as exc:
            raise GraderUnavailable(str(exc)) from None

    def pytest_parse(self, log: str, instance: TaskInstance) -> dict[str, str]:
        return parse_log_pytest(log)

    def report(
        self, status_map: dict[str, str], instance: TaskInstance
    ) -> tuple[TestsReport, TestsReport, bool]:
        return rules.report(status_map, instance.fail_to_pass, instance.pass_to_pass, eval_type_for(instance))


BuiltinPytestGrader = BuiltinGrader
"""The former name (the built-in grader once knew pytest only)."""


class SwebenchGrader:
    """swebench 5.x's own parsers and report functions (imported on construction; 4.x: ImportError)."""

    kind = "swebench-log-parser"

    def __init__(self) -> None:
        from swebench.harness import constants, grading
        from swebench.harness.log_parsers import PARSER_REGISTRY  # 5.x: parsers by name
        from swebench.types import TestSpec

        self._c, self._g, self._registry, self._spec_type = constants, grading, PARSER_REGISTRY, TestSpec

    def spec(self, instance: TaskInstance):
        """The 5.x ``TestSpec`` of an instance (a few parsers read its version or id)."""
        return self._spec_type(
            instance_id=instance.instance_id, image=instance.image, eval_script_list=[],
            repo=instance.repo, version=instance.version, FAIL_TO_PASS=list(instance.fail_to_pass),
            PASS_TO_PASS=list(instance.pass_to_pass), log_parser=log_parser_for(instance),
            eval_type=eval_type_for(instance), image_assets=dict(instance.image_assets),
        )  # fmt: skip

    def parse(self, log: str, instance: TaskInstance) -> tuple[str, dict[str, str]]:
        try:
            name = log_parser_for(instance)
        except NoLogParser as exc:
            raise GraderUnavailable(str(exc)) from None
        if name not in self._registry:
            raise GraderUnavailable(f"swebench has no log parser named {name!r}")
        return name, self._registry[name](log, self.spec(instance))

    def pytest_parse(self, log: str, instance: TaskInstance) -> dict[str, str]:
        return self._registry["parse_log_pytest"](log, self.spec(instance))

    def report(
        self, status_map: dict[str, str], instance: TaskInstance
    ) -> tuple[TestsReport, TestsReport, bool]:
        c, g = self._c, self._g
        gold = {
            "instance_id": instance.instance_id,
            c.FAIL_TO_PASS: list(instance.fail_to_pass),
            c.PASS_TO_PASS: list(instance.pass_to_pass),
        }
        rep = g.get_eval_tests_report(status_map, gold, eval_type=c.EvalType(eval_type_for(instance)))
        resolved = g.get_resolution_status(rep) == c.ResolvedStatus.FULL.value
        return TestsReport(**rep[c.FAIL_TO_PASS]), TestsReport(**rep[c.PASS_TO_PASS]), resolved


def default_grader() -> LogGrader:
    """The project's own grader: no package needed, verdicts equal to swebench 5.x's."""
    return BuiltinGrader()


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


def _markers_ok(log: str) -> bool:
    """5.x needs both markers; a script without any (not SWE-bench-shaped) is read whole."""
    return (START_TEST_OUTPUT in log and END_TEST_OUTPUT in log) or START_TEST_OUTPUT not in log


def _rule(instance: TaskInstance, statuses: dict[str, str], check: rules.LogCheck, resolved: bool) -> str:
    """The 5.x rule(s) that decided, when 4.1.0's rules would give another verdict on this map."""
    legacy = (
        rules.legacy_report(statuses, instance.fail_to_pass, instance.pass_to_pass, eval_type_for(instance))[
            2
        ]
        and check.rule not in rules.CHECKS_OF_4X
    )
    if legacy == resolved:
        return ""
    if not check:
        return check.rule
    found: set[str] = set()
    for tests, skip_rule in (
        (instance.fail_to_pass, "skipped-fail-to-pass"),
        (instance.pass_to_pass, "skipped-pass-to-pass"),
    ):
        for test in tests:
            key = rules.resolve_case(test, statuses)
            if key is not None and key != test:
                found.add("prefix-match")
            if key is not None and statuses[key] == rules.SKIPPED:
                found.add(skip_rule)
    return ",".join(sorted(found)) or "swebench-5"


def _grade_lists(
    instance: TaskInstance,
    test_log: str,
    grader: LogGrader,
    *,
    strict: bool,
    nonce: str,
    done: Callable[..., GradeResult],
) -> GradeResult:
    """FAIL_TO_PASS / PASS_TO_PASS from the log: parse, 5.x's log checks, report (strict: integrity's)."""
    section, markers = _test_output(test_log), _markers_ok(test_log)
    if nonce:
        found = nonce_section(test_log, nonce)
        section, markers = (found.text, True) if isinstance(found, NonceSection) else ("", True)
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
    check = rules.check_log(test_log, statuses, markers=markers)
    if not check:  # 5.x: the log says nothing trustworthy; every expected test counts as failed
        f2p = TestsReport(failure=list(instance.fail_to_pass))
        p2p = TestsReport(failure=list(instance.pass_to_pass))
        resolved = False
    n_f2p, n_p2p = len(instance.fail_to_pass), len(instance.pass_to_pass)
    msg = f"FAIL_TO_PASS {len(f2p.success)}/{n_f2p} passed, PASS_TO_PASS {len(p2p.success)}/{n_p2p} passed"
    if not statuses:
        msg += "; no test results found in the log"
    elif strict_note:
        msg += f"; {strict_note}"
    if not check and statuses:
        msg += f"; {check.reason} ({check.rule})"
    return done(
        GradeStatus.RESOLVED if resolved else GradeStatus.UNRESOLVED, msg,
        fail_to_pass=f2p, pass_to_pass=p2p, tests_status=statuses,
        method=f"{grader.kind}:{name}", rule="" if strict else _rule(instance, statuses, check, resolved),
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
    ``strict`` (integrity grading, `swe_rl.grading.verdict.strict.strict_report`): an expected test
    that did not run, was skipped or contradicts itself in the log is a failure.
    ``nonce`` (a `swe_rl.grading.canaries.plan.CanaryPlan`'s): only the section between the runner's nonce
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
        return _grade_lists(instance, test_log, grader, strict=strict, nonce=nonce, done=done)
    if instance.expected_statuses:
        return _grade_r2e(instance, _test_output(test_log), grader)
    if returncode is None:
        return done(GradeStatus.ENV_ERROR, "no test lists and no return code to grade by")
    status = GradeStatus.RESOLVED if returncode == 0 else GradeStatus.UNRESOLVED
    return done(status, f"no test lists; tests exited with {returncode}", method="exit-code")
