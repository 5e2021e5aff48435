"""`plan_canaries` on the fixture rows and on SWE-bench-shaped scripts (swebench builds them offline)."""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path

import pytest

from swe_rl.grading.canaries.log_audit import start_token
from swe_rl.grading.canaries.plan import CanaryPlan, check_canaries, plan_canaries
from swe_rl.tasks import TaskInstance, eval_script_for, instance_from_row
from swe_rl.tasks.eval_scripts import RUN_END_MARKER, RUN_START_MARKER

ROOT = Path(__file__).resolve().parents[2]
ROWS = [json.loads(line) for line in (ROOT / "data/fixtures/instances.jsonl").read_text().splitlines()]


def _fixture(instance_id: str) -> TaskInstance:
    return instance_from_row(next(r for r in ROWS if r["instance_id"] == instance_id))


@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
def test_every_fixture_gets_canaries_beside_its_tests(row):
    instance = instance_from_row(row)
    script = eval_script_for(instance)
    plan = plan_canaries(instance, script, random.Random(1))
    assert plan.runner == "pytest" and not plan.skipped
    assert subprocess.run(["bash", "-n"], input=plan.script, text=True).returncode == 0
    test_file = re.search(r"^pytest -rA (\S+)$", script, flags=re.MULTILINE).group(1)
    assert plan.canary_file.rsplit("/", 1)[0] == test_file.rsplit("/", 1)[0] or "/" not in test_file
    assert f"pytest -rA {test_file} {plan.canary_file}\n" in plan.script  # named: the run collects it
    expected_dir = instance.fail_to_pass[0].split("::")[0].rsplit("/", 1)[0]
    for test in plan.must_pass + plan.must_fail:  # spelled as the run's ids are
        assert test.startswith(plan.canary_file + "::") and test.rsplit("/", 1)[0] in (expected_dir, test)
    # in no patch, not known before the run
    for text in (instance.patch, instance.test_patch, script):
        assert plan.canary_file.rsplit("/", 1)[-1] not in text and plan.nonce not in text


def test_plans_differ_per_run_and_hide_the_nonce():
    instance = _fixture("pytoolz__toolz-9001")
    script = eval_script_for(instance)
    a, b = plan_canaries(instance, script), plan_canaries(instance, script)
    assert a.nonce != b.nonce and a.canary_file != b.canary_file and set(a.must_fail).isdisjoint(b.must_fail)
    # the nonce is on one line only, the end marker printed with tracing off after the tests
    (line,) = [x for x in a.script.split("\n") if a.nonce in x]
    assert line.startswith(f'__swe_m="{RUN_END_MARKER} {a.nonce} exit $__swe_rc"; printf')
    assert line.endswith("printf '%s\\n' \"$__swe_m\" >&2")  # on stdout and stderr
    assert f"{RUN_START_MARKER} {start_token(a.nonce)}" in a.script and start_token(a.nonce) != a.nonce
    lines = a.script.split("\n")
    assert lines[0] == "#!/bin/bash" and lines[1] == "{" and lines[-2:] == ["}", ""]  # parsed whole by bash
    hide = next(i for i, x in enumerate(lines) if 'rm -f -- "$__swe_self"' in x)
    assert hide < next(i for i, x in enumerate(lines) if x.startswith("pytest -rA"))
    assert "export" not in a.script  # the nonce reaches no environment


def _swebench_row(repo: str, test_file: str, **extra) -> TaskInstance:
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # 4.x's specs (the swebench_4 fixture)

    version = list(MAP_REPO_VERSION_TO_SPECS[repo])[-1]
    test_patch = (
        f"diff --git a/{test_file} b/{test_file}\n--- a/{test_file}\n+++ b/{test_file}\n"
        "@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    )
    return TaskInstance(
        instance_id=repo.replace("/", "__") + "-1", repo=repo, version=version, base_commit="a" * 40,
        problem_statement="", image="none", test_patch=test_patch, fail_to_pass=["t"], pass_to_pass=[], **extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("repo", "test_file", "planted"),
    [
        ("astropy/astropy", "astropy/io/fits/tests/test_header.py", True),
        ("pytest-dev/pytest", "testing/test_collection.py", True),
        ("psf/requests", "tests/test_requests.py", True),
        ("django/django", "tests/queries/tests.py", False),
        ("sympy/sympy", "sympy/core/tests/test_basic.py", False),
        ("sphinx-doc/sphinx", "tests/test_build.py", False),
    ],
)
def test_swebench_scripts_get_canaries_when_the_runner_is_pytest(repo, test_file, planted, swebench_4):
    instance = _swebench_row(repo, test_file)
    script = eval_script_for(instance)
    plan = plan_canaries(instance, script, random.Random(3))
    assert plan.nonce and RUN_START_MARKER in plan.script  # nonce markers whatever the runner
    assert subprocess.run(["bash", "-n"], input=plan.script, text=True).returncode == 0  # bash parses it
    assert bool(plan.must_fail) is planted and bool(plan.skipped) is not planted
    if planted:
        assert plan.canary_file.rsplit("/", 1)[0] == test_file.rsplit("/", 1)[0]
        assert f"{test_file} {plan.canary_file}" in plan.script
    else:
        assert "not pytest" in plan.skipped


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("pytest -rA -k 'add or sub' t/test_a.py", "-k"),
        ("pytest -rA -x t/test_a.py", "-x"),
        ("pytest -rA -vx t/test_a.py", "-x"),
        ("pytest -rA --exitfirst t/test_a.py", "--exitfirst"),
        ("pytest -rA --maxfail=1 t/test_a.py", "--maxfail"),
        ("pytest -rA t/test_a.py | tee log", "plain"),
        ("pytest -rA -p no:unittest t/test_a.py", "unittest"),
    ],
)
def test_commands_that_select_or_stop_early_get_no_canaries(command, why):
    script = f"#!/bin/bash\ncd /testbed\n: '>>>>> Start Test Output'\n{command}\n: '>>>>> End Test Output'\n"
    instance = TaskInstance(
        instance_id="a__b-1",
        repo="a/b",
        problem_statement="",
        image="none",
        fail_to_pass=["t"],
        eval_script=script,
    )
    plan = plan_canaries(instance, script)
    assert plan.skipped and why in plan.skipped and not plan.must_fail and plan.nonce


def test_directory_commands_collect_the_canary_without_naming_it():
    script = "#!/bin/bash\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA -p no:cacheprovider tests\n: '>>>>> End Test Output'\n"
    test_patch = "diff --git a/tests/unit/test_a.py b/tests/unit/test_a.py\n--- a/tests/unit/test_a.py\n+++ b/tests/unit/test_a.py\n@@ -1 +1,2 @@\n x\n+y\n"
    instance = TaskInstance(
        instance_id="a__b-1", repo="a/b", problem_statement="", image="none", test_patch=test_patch,
        fail_to_pass=["tests/unit/test_a.py::test_x"], eval_script=script,
    )  # fmt: skip
    plan = plan_canaries(instance, script)
    assert (
        plan.canary_file.startswith("tests/unit/test_")
        and "\npytest -rA -p no:cacheprovider tests\n" in plan.script
    )


def test_rows_graded_otherwise_are_left_alone():
    r2e = TaskInstance(
        instance_id="a__b-1", repo="b", problem_statement="", image="none", expected_statuses={"t": "PASSED"},
        eval_script="#!/bin/bash\n: '>>>>> Start Test Output'\nbash run_tests.sh\n: '>>>>> End Test Output'\n",
    )  # fmt: skip
    plan = plan_canaries(r2e, r2e.eval_script)
    assert plan.script == r2e.eval_script and plan.skipped and not plan.nonce
    assert check_canaries(plan, {}, "anything") == check_canaries(CanaryPlan(script=""), {}, "")


def test_the_canaries_statuses_leave_the_result():
    """The grader's own tests are not the task's: certification would take their random names for flaky tests."""
    from swe_rl.grading.canaries.plan import CanaryPlan, without_canaries

    plan = CanaryPlan(
        script="",
        canary_file="tests/test_amber_fox_reed.py",
        must_pass=["tests/test_amber_fox_reed.py::TestAmberFox::test_a_b"],
        must_fail=["tests/test_amber_fox_reed.py::TestAmberFox::test_c_d"],
    )
    statuses = {
        "tests/test_x.py::test_one": "PASSED",
        "tests/test_amber_fox_reed.py::TestAmberFox::test_a_b": "PASSED",
        "tests/test_amber_fox_reed.py::TestAmberFox::test_c_d": "FAILED",
        "test_amber_fox_reed.py::TestAmberFox::test_c_d": "FAILED",  # another spelling of its id
    }
    assert without_canaries(plan, statuses) == {"tests/test_x.py::test_one": "PASSED"}
    assert without_canaries(CanaryPlan(script=""), statuses) == statuses


class _SameNumbers(random.Random):
    """A random source whose every integer draw is the same: the worst case of the canaries' values."""

    def randint(self, a: int, b: int) -> int:
        return a


@pytest.mark.parametrize("rng", [_SameNumbers(0), *(random.Random(seed) for seed in range(100))])
def test_the_canaries_come_out_as_planted_whatever_the_draw(rng):
    """Run the planted TestCase itself: the must-pass tests pass and the must-fail ones fail for any
    values drawn (two equal draws once made a must-fail test pass and voided a gold patch)."""
    import unittest

    instance = _fixture("pytoolz__toolz-9001")
    plan = plan_canaries(instance, eval_script_for(instance), rng)
    namespace: dict = {}
    exec(compile(plan.canary_source, plan.canary_file, "exec"), namespace)
    case = next(v for v in namespace.values() if isinstance(v, type) and issubclass(v, unittest.TestCase))
    for test_id in plan.must_pass + plan.must_fail:
        outcome = unittest.TestResult()
        case(test_id.rsplit("::", 1)[1]).run(outcome)
        assert outcome.wasSuccessful() == (test_id in plan.must_pass), (test_id, plan.canary_source)
