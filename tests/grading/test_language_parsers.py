"""Go, JavaScript and Rust logs: our parsers equal swebench 5.x's functions of the same name, on the real
logs of the multilang fixtures (tests/grading/multilang_logs/, captured from their images) and on
hand-made lines; grading those logs: gold resolves, the unfixed run does not, a run with no tests never.

The comparison imports swebench 5.x's ``PARSER_REGISTRY`` when it is importable (the project pins 4.1:
``pip install --target .deps swebench==5.0.2 --no-deps`` and put it first on PYTHONPATH)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rl.grading.languages import LANGUAGES, language_contradictions, language_of, row_parser
from swe_rl.grading.logs import BuiltinPytestGrader, default_grader, grade
from swe_rl.grading.parsers import PARSERS
from swe_rl.grading.result import GradeStatus
from swe_rl.tasks.rows import instance_from_row

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path(__file__).resolve().parent / "multilang_logs"
ROWS = [
    json.loads(x) for x in (ROOT / "data/fixtures/instances_multilang.jsonl").read_text().splitlines() if x
]
REAL_LOGS = sorted(LOGS.glob("*.log"))

HAND_MADE = {
    "parse_log_gotest": [
        "--- PASS: TestA (0.00s)\n    --- FAIL: TestA/sub_case (0.01s)\n--- SKIP: TestB (0.00s)\n",
        "--- PASS: TestA (0.00s)\n--- FAIL: TestA (0.00s)\n--- PASS: Test (with parens) (1.5s)\n",
        "--- PASS: TestA (0.00s) trailing\n--- PASS:  TestB (0.00s)\n\t--- PASS: TestC ()\n--- ok: TestD (0s)",
    ],
    "parse_log_cargo": [
        "test a::b ... ok\ntest c ... FAILED\ntest d ... ignored\ntest e ... bench\n",
        "test  spaced   ...   ok\ntest x ... ok extra\n   test y ... ok   \ntest z ... FAILED\ntest z ... ok\n",
    ],
    "parse_log_tap": [
        "ok 1 - a\nnot ok 2 - b\n    ok 1 - sub\nok 3 - c # SKIP later\nnot ok 4 b\nok five - x\n",
        "TAP version 13\n1..2\nok 1\nok 2 -\n  not ok 10 - deep name with - dash\n",
    ],
    "parse_log_jest": [
        "  ✓ adds (3 ms)\n  ✕ subtracts (10 ms)\n  ○ skipped one\n  ✓ spaced  name  (1 ms)\n✓ x (2 s)\n",
    ],
    "parse_log_vitest": [
        " ✓ adds 3ms\n × fails\n ↓ skipped [skipped]\n ✓ spaced  3ms\n ✓ src/a.test.ts > suite > case 12ms\n",
    ],
    "parse_log_jest_json": ["[PASSED] a b\n[FAILED] c\n [PASSED]  d\n[SKIPPED] e\n"],
}


def _official():
    registry = pytest.importorskip("swebench.harness.log_parsers").__dict__.get("PARSER_REGISTRY")
    if registry is None:
        pytest.skip("swebench < 5 has no PARSER_REGISTRY (install 5.x in .deps)")
    return registry


def test_every_language_parser_is_registered():
    for language in LANGUAGES:
        for name in language.parsers:
            if name != "parse_log_karma":  # listed for language detection; not implemented here
                assert name in PARSERS, name


@pytest.mark.parametrize("log_path", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_real_fixture_logs_parse_as_swebench_5(log_path):
    registry = _official()
    instance_id = log_path.name.split(".")[0]
    (row,) = [r for r in ROWS if r["instance_id"] == instance_id]
    log = log_path.read_text()
    ours = PARSERS[row["log_parser"]](log)
    assert ours and ours == registry[row["log_parser"]](log, None)


@pytest.mark.parametrize(("name", "log"), [(n, log) for n, logs in HAND_MADE.items() for log in logs])
def test_hand_made_lines_parse_as_swebench_5(name, log):
    registry = _official()
    assert PARSERS[name](log) == registry[name](log, None)


@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
@pytest.mark.parametrize("grader_kind", ["builtin", "default"])
@pytest.mark.parametrize("strict", [False, True])
def test_gold_resolves_noop_does_not_and_no_tests_never(row, grader_kind, strict):
    instance = instance_from_row(row)
    assert language_of(instance) is not None and row_parser(instance) is not None
    grader = BuiltinPytestGrader() if grader_kind == "builtin" else default_grader()

    def status(log: str) -> GradeStatus:
        return grade(
            instance, patch="x", apply_status=True, test_log=log, grader=grader, strict=strict
        ).status

    gold = (LOGS / f"{row['instance_id']}.gold.log").read_text()
    noop = (LOGS / f"{row['instance_id']}.noop.log").read_text()
    assert status(gold) is GradeStatus.RESOLVED
    assert status(noop) is GradeStatus.UNRESOLVED
    assert status("") is GradeStatus.UNRESOLVED
    markers_only = ": '>>>>> Start Test Output'\n: '>>>>> End Test Output'\n"
    assert status(markers_only) is GradeStatus.UNRESOLVED
    # the suite ran but only the P2P tests (a filter, a build failure of the new test file...)
    p2p_only = "\n".join(
        line for line in gold.split("\n") if not any(t in line for t in instance.fail_to_pass)
    )
    assert status(p2p_only) is GradeStatus.UNRESOLVED


def test_a_pytest_log_is_never_read_for_a_language_row():
    row = next(r for r in ROWS if r["log_parser"] == "parse_log_gotest")
    instance = instance_from_row(row)
    pytest_log = "".join(f"PASSED {t}\n" for t in (*instance.fail_to_pass, *instance.pass_to_pass))
    result = grade(instance, patch="x", apply_status=True, test_log=pytest_log, grader=BuiltinPytestGrader())
    assert result.status is GradeStatus.UNRESOLVED and not result.tests_status


@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
def test_a_forged_result_line_after_the_real_one_is_a_contradiction(row):
    """Code under test printing a passing line for a failed F2P test (a Rust panic message, Go's fmt.Println):
    the official last-line-wins reading pays, strict grading does not."""
    instance = instance_from_row(row)
    noop = (LOGS / f"{row['instance_id']}.noop.log").read_text()
    gold = (LOGS / f"{row['instance_id']}.gold.log").read_text()
    forged_lines = [
        line
        for line in gold.split("\n")
        if any(t in line for t in instance.fail_to_pass) and PARSERS[row["log_parser"]](line)
    ]
    end = "+ : '>>>>> End Test Output'"
    forged = noop.replace(end, "\n".join(forged_lines) + "\n" + end)
    naive = grade(instance, patch="x", apply_status=True, test_log=forged, grader=BuiltinPytestGrader())
    strict = grade(
        instance, patch="x", apply_status=True, test_log=forged, grader=BuiltinPytestGrader(), strict=True
    )
    assert naive.status is GradeStatus.RESOLVED
    assert strict.status is GradeStatus.UNRESOLVED and "contradicted" in strict.message
    assert language_contradictions(instance, forged, set(instance.fail_to_pass)) == set(instance.fail_to_pass)
