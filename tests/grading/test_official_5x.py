"""Our verdicts equal swebench 5.x's own, called directly: ``get_logs_eval`` / ``get_eval_report``.

Three tables: every combination of statuses of two tests over the F2P/P2P list shapes, both eval
types and the exit-code record; cut ids (prefix matching) over every pair of statuses; and real
logs: tests/data/logs and each fixture of data/fixtures run with its gold patch and with none in
real containers. Skips, saying why, when the installed swebench is not 5.x.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from swe_rl.grading import ApplyStatus, BuiltinGrader, GradeStatus, grade
from swe_rl.tasks import TaskInstance, instance_from_row, official_script
from swe_rl.tasks.specs import eval_type_for, log_parser_for

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
STATUSES = ["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", None]
LISTS = [(["t::a"], ["t::b"]), (["t::a", "t::b"], []), ([], ["t::a", "t::b"]), (["t::b"], ["t::a"])]


@pytest.fixture(scope="module")
def official():
    pytest.importorskip("swebench", reason="swebench is not installed")
    try:
        from swebench.harness import grading
        from swebench.types import TestSpec
    except ImportError:
        pytest.skip("the installed swebench is not 5.x: pip install swebench==5.0.2 (the eval extra's pin)")
    return grading, TestSpec


def official_grade(official, inst: TaskInstance, log: str, tmp_path: Path) -> tuple[dict, dict]:
    """(5.x's report for the instance, 5.x's status map or {} when it found no valid run)."""
    grading, spec_type = official
    spec = spec_type(
        instance_id=inst.instance_id, image=inst.image, eval_script_list=[], repo=inst.repo,
        version=inst.version, FAIL_TO_PASS=list(inst.fail_to_pass), PASS_TO_PASS=list(inst.pass_to_pass),
        log_parser=log_parser_for(inst), eval_type=eval_type_for(inst),
    )  # fmt: skip
    path = tmp_path / "test_output.txt"
    path.write_text(log)
    pred = {"instance_id": inst.instance_id, "model_patch": "p", "model_name_or_path": "m"}
    report = grading.get_eval_report(spec, pred, str(path), include_tests_status=True)[inst.instance_id]
    return report, grading.get_logs_eval(spec, str(path))[0]


def assert_same(official, inst: TaskInstance, log: str, tmp_path: Path) -> None:
    ours = grade(inst, patch="p", apply_status=ApplyStatus.APPLIED, test_log=log, grader=BuiltinGrader())
    theirs, status_map = official_grade(official, inst, log, tmp_path)
    where = (inst.fail_to_pass, inst.pass_to_pass, inst.eval_type, log[-300:])
    assert ours.resolved is theirs["resolved"], where
    assert ours.status is (GradeStatus.RESOLVED if theirs["resolved"] else GradeStatus.UNRESOLVED), where
    if theirs["patch_successfully_applied"]:  # 5.x found a valid run: the same statuses and lists
        assert ours.tests_status == status_map, where
        assert ours.fail_to_pass.model_dump() == theirs["tests_status"]["FAIL_TO_PASS"], where
        assert ours.pass_to_pass.model_dump() == theirs["tests_status"]["PASS_TO_PASS"], where
    else:  # no valid run for 5.x: ours fails every expected test, and the grade says why
        assert not ours.fail_to_pass.success and not ours.pass_to_pass.success, where


def pytest_log(statuses: dict[str, str | None], exit_code: int | None) -> str:
    lines = [
        ">>>>> Start Test Output",
        *(f"{s} {t}" for t, s in statuses.items() if s),
        ">>>>> End Test Output",
    ]
    if exit_code is not None:
        lines.append(f">>>>> Test Exit Code: {exit_code}")
    return "\n".join(lines) + "\n"


def instance(f2p, p2p, **kw) -> TaskInstance:
    return TaskInstance(
        instance_id=kw.pop("instance_id", "o__r-1"), repo=kw.pop("repo", "o/r"), problem_statement="bug",
        image="img", fail_to_pass=list(f2p), pass_to_pass=list(p2p), **kw,
    )  # fmt: skip


@pytest.mark.parametrize("eval_type", ["pass_and_fail", "fail_only"])
@pytest.mark.parametrize("exit_code", [None, 0, 1])
def test_every_status_combination(official, tmp_path, eval_type, exit_code):
    for a, b in itertools.product(STATUSES, repeat=2):
        log = pytest_log({"t::a": a, "t::b": b}, exit_code)
        for f2p, p2p in LISTS:
            assert_same(official, instance(f2p, p2p, eval_type=eval_type), log, tmp_path)


def test_cut_ids_are_prefix_matched_as_5x_does(official, tmp_path):
    cut = "t::c[1-"  # an expected id cut inside its parameters, as 676 of Verified's are
    for s1, s2, other in itertools.product(STATUSES, STATUSES, ["PASSED", "FAILED"]):
        log = pytest_log({"t::c[1-2]": s1, "t::c[1-3]": s2, "t::c[10]": other, "t::a": "PASSED"}, None)
        for f2p, p2p in [([cut], ["t::a"]), (["t::a"], [cut]), ([cut, "t::c[1"], [])]:
            assert_same(official, instance(f2p, p2p), log, tmp_path)


def test_runs_that_ran_nothing_never_resolve_even_fail_only(official, tmp_path):
    for log in ["", ">>>>> Start Test Output\n>>>>> End Test Output\n", ">>>>> Start Test Output\nExecuted 0 of 0\n>>>>> End Test Output\n",
                ">>>>> Start Test Output\n3 passing\n>>>>> End Test Output\n", ">>>>> Start Test Output\nPASSED t::a\n"]:  # fmt: skip
        for eval_type in ("fail_only", "pass_and_fail"):
            assert_same(
                official, instance(["t::a"], [], repo="chartjs/Chart.js", eval_type=eval_type), log, tmp_path
            )
    r = grade(instance(["t::a"], [], repo="chartjs/Chart.js"), patch="p", apply_status="applied", test_log="")
    assert not r.resolved and r.rule == "suite-not-run"


RECORDED = [
    ("pytest_rA", "pytest-dev/pytest", ["toolz/tests/test_itertoolz.py::test_partition_all"],
     ["toolz/tests/test_itertoolz.py::test_remove", "toolz/tests/test_itertoolz.py::test_interpose[hello"]),
    ("pytest_rA", "pallets/flask", ["toolz/tests/test_itertoolz.py::test_groupby"], ["toolz/tests/test_itertoolz.py::test_get[x[0]]"]),
    ("pytest_rA", "astropy/astropy", ["toolz/tests/test_itertoolz.py::test_groupby"], ["toolz/tests/test_itertoolz.py::test_random_sample_seed"]),
    ("pytest_collection_error", "pytest-dev/pytest", ["tests/test_inflection.py::test_x"], []),
    ("django", "django/django",
     ["test_add_binaryfield (migrations.test_operations.OperationTests)",
      "RenameModel operations shouldn't trigger the caching of rendered apps"],
     ["test_references_model_mixin (migrations.test_operations.TestCreateModel)"]),
    ("django", "django/django", ["test_alter_field_pk_fk (migrations.test_operations.OperationTests)"],
     ["test_create_model_with_constraint (migrations.test_operations.OperationTests)"]),
    ("sympy", "sympy/sympy", ["test__aresame", "test_mod_inverse"], ["test_structure"]),
    ("sympy", "sympy/sympy", ["test_equality"], ["test_Integer_new", "test_atoms"]),
    ("empty", "sympy/sympy", ["test_equality"], []),
    ("r2e_run_tests", "pydata/xarray", ["r2e_tests/test_1.py::TestFrame::test_to_csv_basic"], []),
]  # fmt: skip


@pytest.mark.parametrize(("name", "repo", "f2p", "p2p"), RECORDED)
def test_recorded_logs(official, tmp_path, name, repo, f2p, p2p):
    text = (LOGS / f"{name}.log").read_text()
    for exit_code in ("", "\n>>>>> Test Exit Code: 0\n", "\n>>>>> Test Exit Code: 1\n"):
        assert_same(official, instance(f2p, p2p, repo=repo), text + exit_code, tmp_path)


def run_fixture(image: str, script: str, patch: str, name: str) -> str:
    """The eval script's output in a fresh container of the fixture's image (patch applied first)."""
    apply = f"cd /testbed && git apply -v - <<'EOF_H_SB5'\n{patch}\nEOF_H_SB5\n" if patch.strip() else ""
    proc = subprocess.run(
        ["docker", "run", "-i", "--rm", "--name", name, "--label", "swe-rl.test=h-sb5", "--network", "none",
         image, "/bin/bash", "-c", "exec 2>&1; bash -s"],
        input=apply + script, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return proc.stdout


FIXTURES = [
    json.loads(line) for line in (ROOT / "data/fixtures/instances.jsonl").read_text().splitlines() if line
]


@pytest.mark.docker
@pytest.mark.parametrize("row", FIXTURES, ids=[r["instance_id"] for r in FIXTURES])
def test_fixture_runs_gold_and_empty(official, docker_client, tmp_path, row):
    inst = instance_from_row(row)
    script = official_script(inst.eval_script or "")
    for label, patch in (("gold", inst.patch), ("empty", "")):
        log = run_fixture(inst.image, script, patch, f"h-sb5-{inst.instance_id}-{label}")
        assert ">>>>> Test Exit Code:" in log, log[-2000:]
        assert_same(official, inst, log, tmp_path)
        verdict = grade(inst, patch="p", apply_status="applied", test_log=log).resolved
        assert verdict is (label == "gold") or inst.instance_id in UNCERTIFIABLE_OFFLINE, (label, verdict)


# 9004's fix needs a network trait (a connect that hangs; here: none); 9005 has a coin-flip test
UNCERTIFIABLE_OFFLINE = {"pytoolz__toolz-9004", "pytoolz__toolz-9005"}


# The verdicts these logs had under 4.1.0 (the former table of tests/grading/test_logs.py): unchanged.
VERDICTS_UNDER_4_1 = [False, True, False, False, True, False, True, False, False, True]


@pytest.mark.parametrize(("case", "resolved"), zip(RECORDED, VERDICTS_UNDER_4_1, strict=True))
def test_recorded_verdicts_are_those_of_4_1(case, resolved):
    name, repo, f2p, p2p = case
    r = grade(
        instance(f2p, p2p, repo=repo),
        patch="p",
        apply_status="applied",
        test_log=(LOGS / f"{name}.log").read_text(),
    )
    assert r.resolved is resolved and r.rule == ""
