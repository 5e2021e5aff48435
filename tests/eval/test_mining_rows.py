"""Mined rows load in swebench 5.x's own harness as they are (issue 49, item 4).

swebench 5.0.2's ``make_test_spec`` reads ``instance_id``, ``image``, ``eval_script``, ``repo``,
``version``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``log_parser`` and ``eval_type``; its grading looks the
parser up in ``PARSER_REGISTRY`` and the eval type in ``EvalType``. Every committed mined row (and every
fixture row of 5.x's schema), and a row mined here from the test's own small repository, goes through
those real functions; the mined row's log is then graded by swebench's own ``get_eval_report``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rl.eval.mining.history import Candidate, split_commit
from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.eval.mining.validate import task_row
from tests.eval.mining_repos import make_python_repo

ROOT = Path(__file__).resolve().parents[2]
KEYS_5X = ("instance_id", "image", "eval_script", "repo", "version", "FAIL_TO_PASS", "PASS_TO_PASS",
           "log_parser", "eval_type")  # fmt: skip
"""What swebench 5.0.2's make_test_spec reads (swebench/harness/utils.py), restated."""
MINED_AT_LEAST = 50
"""data/mined_tasks/ has at least this many rows (tests/eval/test_mined_set.py checks the exact set)."""


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def committed_rows() -> list[dict]:
    """The mined set's rows, the real-task set's, and the fixture rows of swebench 5.x's schema (they name a parser).

    The Python fixtures of ``data/fixtures/instances.jsonl`` are SWE-bench rows of the older schema
    (no ``log_parser``): they are converted as they load (docs/grading.md), not mined."""
    rows = _rows(ROOT / "data/mined_tasks/instances.jsonl") + _rows(ROOT / "data/real_tasks/instances.jsonl")
    for path in sorted((ROOT / "data/fixtures").glob("*.jsonl")):
        rows += [r for r in _rows(path) if "log_parser" in r]
    return rows


def _list(value: str | list[str]) -> list[str]:
    """SWE-bench's rows carry the test lists as JSON text, the miner's as lists: both load."""
    return json.loads(value) if isinstance(value, str) else value


def _mined_row(tmp_path: Path) -> dict:
    repo = tmp_path / "calc"
    shas = make_python_repo(repo)
    cand = split_commit(repo, shas[1], LANGUAGES["python"])
    assert isinstance(cand, Candidate)
    return task_row(
        repo_name="swe-rl/calc", instance_id="swe-rl__calc-1", language=LANGUAGES["python"], candidate=cand,
        image="swe-rl/mined.swe-rl__calc-1:latest", base_commit="0" * 40,
        fail_to_pass=["tests/test_calc.py::test_add"], pass_to_pass=["tests/test_calc.py::test_mul"],
    )  # fmt: skip


def _harness():
    pytest.importorskip("swebench")
    try:
        from swebench.harness.utils import make_test_spec
    except ImportError:
        pytest.skip("swebench 4.x installed: these rows are of 5.x's schema (pip install swebench==5.0.2)")
    from swebench.harness.constants import EvalType
    from swebench.harness.log_parsers import PARSER_REGISTRY

    return make_test_spec, PARSER_REGISTRY, EvalType


def test_every_committed_row_and_a_freshly_mined_one_loads_in_swebench_5(tmp_path):
    make_test_spec, registry, eval_type = _harness()
    rows = [*committed_rows(), _mined_row(tmp_path)]
    assert len(rows) >= MINED_AT_LEAST + 13 + 3 + 1
    for row in rows:
        assert all(k in row for k in KEYS_5X), (row["instance_id"], [k for k in KEYS_5X if k not in row])
        spec = make_test_spec(row)  # as it is: no key added, none renamed
        assert spec.image == row["image"] == row.get("image_name", row["image"]), row["instance_id"]
        assert spec.FAIL_TO_PASS == _list(row["FAIL_TO_PASS"]) and spec.PASS_TO_PASS == _list(
            row["PASS_TO_PASS"]
        )
        assert spec.log_parser in registry and eval_type(spec.eval_type)
        assert ">>>>> Start Test Output" in spec.eval_script and ">>>>> End Test Output" in spec.eval_script


def test_a_row_named_only_by_image_name_is_what_swebench_5_refuses(tmp_path):
    """The defect this fixes: the miner's rows carried ``image_name`` only."""
    make_test_spec, _, _ = _harness()
    row = _mined_row(tmp_path)
    old = {k: v for k, v in row.items() if k != "image"}
    with pytest.raises(KeyError, match="image"):
        make_test_spec(old)


def test_swebench_grades_a_mined_row_from_its_own_log(tmp_path):
    make_test_spec, _, _ = _harness()
    from swebench.harness.grading import get_eval_report

    spec = make_test_spec(_mined_row(tmp_path))
    log = tmp_path / "test_output.txt"
    for passed, resolved in ((("test_add", "test_mul"), True), (("test_mul",), False)):
        lines = [f"PASSED tests/test_calc.py::{t}" for t in passed]
        lines += [f"FAILED tests/test_calc.py::{t}" for t in {"test_add", "test_mul"} - set(passed)]
        status = 0 if resolved else 1
        log.write_text(
            "+ : '>>>>> Start Test Output'\n" + "\n".join(sorted(lines)) + "\n"
            f"+ : '>>>>> End Test Output'\nSWEBENCH_TEST_EXIT_CODE: {status}\n"
        )
        pred = {"instance_id": spec.instance_id, "model_name_or_path": "t", "model_patch": "diff"}
        report = get_eval_report(spec, pred, str(log), include_tests_status=False)
        assert report[spec.instance_id]["resolved"] is resolved
