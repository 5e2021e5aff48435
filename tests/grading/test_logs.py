"""Grading: status order, SWE-bench log parsing and F2P/P2P decisions on recorded logs.

Logs under tests/data/logs are hand-written in the formats the tools print (pytest -rA,
Django's runtests.py --verbosity 2, sympy's bin/test). The comparison with swebench 5.x's own
functions is tests/grading/test_official_5x.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swe_rl.grading import (
    ApplyStatus,
    BuiltinGrader,
    BuiltinPytestGrader,
    GradeStatus,
    default_grader,
    grade,
)
from swe_rl.tasks import TaskInstance

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def log(name: str) -> str:
    return (LOGS / f"{name}.log").read_text()


def instance(repo="pytoolz/toolz", f2p=(), p2p=(), **kw) -> TaskInstance:
    return TaskInstance(
        instance_id=kw.pop("instance_id", repo.replace("/", "__") + "-1"), repo=repo,
        problem_statement="bug", image="img", fail_to_pass=list(f2p), pass_to_pass=list(p2p),
        data_source=kw.pop("data_source", "swe-rl-fixtures"), **kw,
    )  # fmt: skip


def run(inst, test_log="", grader=None, **kw):
    args = {"patch": PATCH, "apply_status": ApplyStatus.APPLIED, "test_log": test_log, "returncode": 1}
    args.update(kw)
    return grade(inst, grader=grader, **args)


TOOLZ_F2P = ["toolz/tests/test_itertoolz.py::test_partition_all"]
TOOLZ_P2P = [
    "toolz/tests/test_itertoolz.py::test_remove",
    "toolz/tests/test_itertoolz.py::test_get[x[0]]",
    "toolz/tests/test_itertoolz.py::test_interpose[hello",  # ids with spaces are cut, as in SWE-bench
    "toolz/tests/test_functoolz.py::TestCompose::test_compose[()-1]",
]


# ---------------------------------------------------------------------------- order


def test_statuses_before_any_log_is_read():
    inst = instance(f2p=TOOLZ_F2P)
    assert run(inst, patch="  \n").status is GradeStatus.NO_PATCH
    assert run(inst, patch=None).status is GradeStatus.NO_PATCH
    r = run(inst, apply_status=False)
    assert r.status is GradeStatus.PATCH_APPLY_FAILED and not r.resolved and r.method == ""
    assert run(inst, apply_status="failed").status is GradeStatus.PATCH_APPLY_FAILED
    assert run(inst, timed_out=True).status is GradeStatus.EVAL_TIMEOUT
    r = run(inst, env_error="node 3 died", apply_status=False, timed_out=True)
    assert r.status is GradeStatus.ENV_ERROR and r.infra_failure and r.message == "node 3 died"
    with pytest.raises(ValueError):
        run(inst, apply_status="maybe")


# ---------------------------------------------------------------------------- pytest logs


@pytest.mark.parametrize("grader", [BuiltinPytestGrader(), None], ids=["builtin", "default"])
def test_pytest_log_failing_f2p_is_unresolved(grader):
    r = run(instance(f2p=TOOLZ_F2P, p2p=TOOLZ_P2P), log("pytest_rA"), grader=grader)
    assert r.status is GradeStatus.UNRESOLVED and not r.resolved
    assert r.fail_to_pass.failure == TOOLZ_F2P and r.pass_to_pass.success == TOOLZ_P2P
    assert r.method.endswith(":parse_log_pytest")
    assert r.tests_status["toolz/tests/test_itertoolz.py::test_random_sample_seed"] == "XFAIL"


@pytest.mark.parametrize("grader", [BuiltinPytestGrader(), None], ids=["builtin", "default"])
def test_pytest_log_passing_lists_resolve_and_missing_tests_fail(grader):
    passing = ["toolz/tests/test_functoolz.py::test_curry_simple"]
    r = run(instance(f2p=passing, p2p=TOOLZ_P2P), log("pytest_rA"), grader=grader)
    assert r.status is GradeStatus.RESOLVED and r.resolved
    missing = "toolz/tests/test_functoolz.py::test_not_in_log"
    r = run(instance(f2p=passing, p2p=[*TOOLZ_P2P, missing]), log("pytest_rA"), grader=grader)
    assert not r.resolved and r.pass_to_pass.failure == [missing]


def test_collection_error_fails_every_listed_test():
    inst = instance(repo="jpvanhal/inflection", f2p=["tests/test_inflection.py::test_dasherize"])
    r = run(inst, log("pytest_collection_error"))
    assert r.status is GradeStatus.UNRESOLVED
    assert r.tests_status == {"tests/test_inflection.py": "ERROR"}
    assert r.fail_to_pass.failure == ["tests/test_inflection.py::test_dasherize"]


def test_empty_log_is_unresolved_and_says_so():
    r = run(instance(f2p=TOOLZ_F2P), log("empty"))
    assert r.status is GradeStatus.UNRESOLVED and r.tests_status == {}
    assert "no test results" in r.message


def test_log_without_markers_is_parsed_whole():
    text = "PASSED t.py::a\nFAILED t.py::b - boom\n"
    r = run(instance(f2p=["t.py::a"], p2p=["t.py::b"]), text)
    assert r.tests_status == {"t.py::a": "PASSED", "t.py::b": "FAILED"} and not r.resolved


def test_every_python_repo_grades_without_the_swebench_package():
    r = run(instance(repo="django/django", f2p=["test_add_binaryfield (migrations.test_operations.OperationTests)"]),
            log("django"), grader=BuiltinPytestGrader())  # fmt: skip
    assert r.status is GradeStatus.RESOLVED and r.method == "builtin-log-parser:parse_log_django"
    assert isinstance(default_grader(), BuiltinGrader)


def test_rows_name_their_parser_and_other_languages_never_fall_back_to_pytest():
    text = "PASSED t.py::a\n"
    named = instance(f2p=["t.py::a"], log_parser="parse_log_pytest_v2")
    assert run(named, text).method == "builtin-log-parser:parse_log_pytest_v2"
    go = instance(repo="caddyserver/caddy", f2p=["TestX"], extra={"language": "go"})
    r = run(go, text)
    assert r.status is GradeStatus.ENV_ERROR and "names no log_parser" in r.message and "go" in r.message
    unknown = instance(f2p=["t.py::a"], log_parser="parse_log_nope")
    r = run(unknown, text)
    assert r.status is GradeStatus.ENV_ERROR and "parse_log_nope" in r.message


# ---------------------------------------------------------------------------- other methods


def test_rows_without_test_lists_grade_by_exit_code():
    inst = instance()
    r = run(inst, "whatever", returncode=0)
    assert r.status is GradeStatus.RESOLVED and r.method == "exit-code"
    assert run(inst, returncode=2).status is GradeStatus.UNRESOLVED
    assert run(inst, returncode=None).status is GradeStatus.ENV_ERROR


@pytest.mark.parametrize("grader", [BuiltinPytestGrader(), None], ids=["builtin", "default"])
def test_r2e_expected_statuses(grader):
    expected = {
        "TestFrame.test_to_csv_basic": "PASSED",
        "TestFrame.test_to_csv_header": "PASSED",
        "test_module_level": "PASSED",
        "TestFrame.test_to_csv_na": "FAILED",
    }
    inst = instance(repo="pandas", data_source="r2e-gym", expected_statuses=expected)
    r = run(inst, log("r2e_run_tests"), grader=grader)
    assert r.status is GradeStatus.RESOLVED and r.method.startswith("r2e-expected-output:")
    assert r.tests_status == expected
    wrong = instance(repo="pandas", expected_statuses={**expected, "TestFrame.test_to_csv_na": "PASSED"})
    r = run(wrong, log("r2e_run_tests"), grader=grader)
    assert not r.resolved and r.fail_to_pass.failure == ["TestFrame.test_to_csv_na"]
    fewer = instance(repo="pandas", expected_statuses={"test_module_level": "PASSED"})
    r = run(fewer, log("r2e_run_tests"), grader=grader)
    assert not r.resolved and "unexpected" in r.message


# ---------------------------------------------------------------------------- 5.x rules


def section(*lines: str, exit_code: int | None = None) -> str:
    text = "\n".join([">>>>> Start Test Output", *lines, ">>>>> End Test Output"])
    return text + (f"\n>>>>> Test Exit Code: {exit_code}" if exit_code is not None else "") + "\n"


@pytest.mark.parametrize(
    ("inst", "text", "resolved", "rule"),
    [
        # exploit: a patch that makes the failing test skip itself no longer resolves
        (instance(f2p=["t::a"], p2p=["t::b"]), section("SKIPPED t::a", "PASSED t::b"), False, "skipped-fail-to-pass"),
        # a skipped PASS_TO_PASS test is kept (4.1.0 agreed: it was in neither list)
        (instance(f2p=["t::a"], p2p=["t::b"]), section("PASSED t::a", "SKIPPED t::b"), True, ""),
        # exploit: a conftest hook printing PASSED lines while the run fails
        (instance(f2p=["t::a"]), section("PASSED t::a", exit_code=1), False, "exit-code"),
        (instance(f2p=["t::a"]), section("PASSED t::a", exit_code=0), True, ""),
        (instance(f2p=["t::a"], p2p=["t::b"]), section("PASSED t::a", "FAILED t::b", exit_code=1), False, ""),
        # exploit: a fail-only repo whose suite never started (any patch resolved under 4.1.0)
        (instance(repo="chartjs/Chart.js", f2p=["renders"]), section("Executed 0 of 0"), False, "suite-not-run"),
        (instance(repo="chartjs/Chart.js", f2p=["renders"]), section("Executed 3 of 3 SUCCESS"), True, ""),
        # an expected id cut inside its parameters (Verified has 676) matches the log's full id
        (instance(f2p=["t::c[a"]), section("PASSED t::c[a b]"), True, ""),  # pytest's parser cuts at the space
        (instance(f2p=["t::c[a b"]), section("PASSED t::c[a b]"), False, ""),
        (instance(f2p=["t::c[a"]), section("PASSED t::c[a-1]", "PASSED t::c[a-2]"), True, "prefix-match"),
        (instance(f2p=["t::c[a"]), section("PASSED t::c[a-1]", "FAILED t::c[a-2]"), False, ""),
        # the harness's own failure markers and a cut-off section: nothing is graded
        (instance(f2p=["t::a"]), section("PASSED t::a", ">>>>> Tests Timed Out"), False, ""),
        (instance(f2p=["t::a"]), ">>>>> Start Test Output\nPASSED t::a\n", False, ""),
    ],
)  # fmt: skip
def test_5x_rules_and_the_rule_that_decided(inst, text, resolved, rule):
    r = run(inst, text)
    assert r.resolved is resolved and r.rule == rule, (r.message, r.rule)
    distrusted = rule == "exit-code" or "Timed Out" in text or "End Test Output" not in text
    if distrusted:  # a log 5.x does not trust: every expected test failed, and the message says why
        assert ")" in r.message and r.fail_to_pass.failure == inst.fail_to_pass
