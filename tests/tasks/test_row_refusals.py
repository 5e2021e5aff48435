"""Rows that could poison training are refused at load, whatever loader reads them (issue #39, item 3).

A row without FAIL_TO_PASS would be graded by exit code (the empty patch could earn a reward); a row
of no known set without an image would be sent to an invented ``swebench/...`` image; a row whose
``log_parser`` is code would have the grader run that code. All rows here are hand-made, shaped
like the public sets' (tests/tasks/fixtures/datasets/README.md says where the shapes come from).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from swe_rl.data.preprocess_swe_dataset import main
from swe_rl.tasks import RowInvalid, TaskInstance, instance_from_row, load_instances
from swe_rl.tasks.datasets import AUTO, convert_row
from swe_rl.tasks.specs import NoLogParser, log_parser_for

FIXTURES = Path(__file__).parent / "fixtures" / "datasets"


@pytest.fixture(autouse=True)
def _no_image_overrides(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)


def first_row(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.jsonl").read_text().splitlines()[0])


def issue_only_live_row() -> dict:
    """What SWE-bench-Live's curation holds before validation: an issue and its PR, no tests yet."""
    return {
        "repo": "amoffat/sh", "pull_number": 745, "instance_id": "amoffat__sh-800", "issue_numbers": ["744"],
        "base_commit": "89333ae48069a5b445b3535232195b2de6f4648f",
        "patch": "diff --git a/sh.py b/sh.py\n--- a/sh.py\n+++ b/sh.py\n@@ -1 +1 @@\n-a\n+b\n",
        "test_patch": "", "problem_statement": "async return_cmd loses the exit code", "hints_text": "",
        "created_at": "2024-03-15T10:30:00Z",
    }  # fmt: skip


def test_an_issue_only_live_row_is_refused_by_auto_with_one_line_and_no_invented_image():
    with pytest.raises(RowInvalid) as exc:
        convert_row(issue_only_live_row(), AUTO)
    message = str(exc.value)
    assert "\n" not in message and "swebench/sweb.eval" not in message
    assert exc.value.instance_id == "amoffat__sh-800"


def test_an_issue_only_row_is_refused_even_when_its_image_is_given():
    row = {**issue_only_live_row(), "docker_image": "starryzhang/sweb.eval.x86_64.amoffat_1776_sh-744"}
    with pytest.raises(RowInvalid, match="FAIL_TO_PASS is empty"):
        convert_row(row, AUTO)
    with pytest.raises(RowInvalid, match="FAIL_TO_PASS is empty"):  # and by the generic reader
        instance_from_row(row)


def test_swe_preprocess_auto_rejects_the_issue_only_row_and_lists_no_image(tmp_path):
    src = tmp_path / "live.jsonl"
    src.write_text(json.dumps(issue_only_live_row()) + "\n" + json.dumps(first_row("swe_bench_live")) + "\n")
    out, err = io.StringIO(), io.StringIO()
    status = main(
        ["--train-data-source", str(src), "--output-dir", str(tmp_path / "o"), "--format", "auto"],
        out=out,
        err=err,
    )
    assert status == 0, err.getvalue()
    kept = [json.loads(line) for line in (tmp_path / "o" / "train.jsonl").read_text().splitlines()]
    assert [r["metadata"]["instance"]["instance_id"] for r in kept] == ["amoffat__sh-744"]
    rejects = [json.loads(line) for line in (tmp_path / "o" / "train.rejects.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in rejects] == ["amoffat__sh-800"]
    images = (tmp_path / "o" / "train.images.txt").read_text()
    assert "swebench/" not in images


def test_auto_still_names_swebench_images_for_rows_of_swebench_schema():
    row = {"instance_id": "a__b-1", "repo": "a/b", "problem_statement": "x", "FAIL_TO_PASS": ["t"],
           "version": "1.0", "environment_setup_commit": "abc"}  # fmt: skip
    assert convert_row(row, AUTO).image == "swebench/sweb.eval.x86_64.a_1776_b-1:latest"
    bare = {k: v for k, v in row.items() if k not in ("version", "environment_setup_commit")}
    with pytest.raises(RowInvalid, match="does not guess its image"):
        convert_row(bare, AUTO)
    assert convert_row(bare, AUTO, image_override="reg/{id_swebench}").image == "reg/a_1776_b-1"
    assert convert_row({**bare, "image_name": "mine/img:1"}, AUTO).image == "mine/img:1"


def _without_f2p(name: str) -> dict:
    row = first_row(name)
    for key in ("FAIL_TO_PASS", "f2p_tests", "s2p_tests", "n2p_tests"):
        if key in row:
            row[key] = {} if key.islower() else []
    return row


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("swe_rebench_v2", AUTO),
        ("swe_smith", AUTO),
        ("multi_swe_bench", AUTO),
        ("swe_bench_live", AUTO),
        ("swe_bench_live", "swe-bench-live"),
    ],
)
def test_every_loader_refuses_a_row_without_fail_to_pass(name, fmt):
    with pytest.raises(RowInvalid) as exc:
        convert_row(_without_f2p(name), fmt)
    assert "\n" not in str(exc.value) and ("empty" in str(exc.value))


def test_multilingual_5x_rows_without_fail_to_pass_are_refused():
    script = (
        "#!/bin/bash\ncd /testbed\n: '>>>>> Start Test Output'\ngo test ./...\n: '>>>>> End Test Output'\n"
    )
    row = {**first_row("swe_bench_multilingual"), "eval_script": script, "log_parser": "parse_log_gotest"}
    assert convert_row(row, "swe-bench-multilingual").fail_to_pass
    with pytest.raises(RowInvalid, match="FAIL_TO_PASS is empty"):
        convert_row({**row, "FAIL_TO_PASS": "[]"}, "swe-bench-multilingual")


def test_generic_and_slime_rows_need_fail_to_pass_even_with_pass_to_pass(tmp_path):
    row = {"instance_id": "a__b-1", "repo": "a/b", "problem_statement": "x", "image_name": "img",
           "PASS_TO_PASS": ["t_keep"]}  # fmt: skip
    with pytest.raises(RowInvalid, match="FAIL_TO_PASS is empty"):
        instance_from_row(row)
    with pytest.raises(RowInvalid, match="FAIL_TO_PASS is empty"):
        instance_from_row({"text": "x", "metadata": {"instance": row}})
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    result = load_instances(path)
    assert not result.instances and "FAIL_TO_PASS is empty" in result.errors[0].message


def test_a_row_that_grades_by_exit_code_on_purpose_says_so_and_loads():
    row = {"instance_id": "a__b-1", "repo": "a/b", "problem_statement": "x", "image_name": "img",
           "grading": "exit-code"}  # fmt: skip
    inst = instance_from_row(row)
    assert not inst.has_test_lists and inst.extra["grading"] == "exit-code"
    with pytest.raises(RowInvalid):
        instance_from_row({**row, "grading": "whatever"})


def test_r2e_rows_grade_by_their_expected_statuses_without_fail_to_pass():
    row = {"repo_name": "pandas", "docker_image": "namanjain12/pandas_final:abc", "commit_hash": "abc",
           "problem_statement": "x", "expected_output_json": json.dumps({"test_a": "PASSED"})}  # fmt: skip
    inst = instance_from_row(row)
    assert inst.expected_statuses == {"test_a": "PASSED"} and not inst.fail_to_pass


PARSER_CODE = """import pathlib
pathlib.Path("{marker}").write_text("the row's code ran")


def parser(log: str) -> dict[str, str]:
    results = {{}}
    for line in log.splitlines():
        if line.startswith("ok "):
            results[line[3:]] = "pass"
    return results
"""


def test_a_code_valued_log_parser_is_refused_at_load_in_one_line_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    code = PARSER_CODE.format(marker=marker)
    row = {**json.loads((FIXTURES / "swe_bench_live.jsonl").read_text().splitlines()[1]), "log_parser": code}
    for attempt in (lambda: convert_row(row, AUTO), lambda: convert_row(row, "swe-bench-live")):
        with pytest.raises(RowInvalid) as exc:
            attempt()
        message = str(exc.value)
        assert "\n" not in message and len(message) < 300 and "Python source" in message
        assert "write_text" not in message and "results" not in message
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({**first_row("swe_bench_live"), "log_parser": code, "image_name": "i"}) + "\n")
    assert "Python source" in load_instances(path).errors[0].message
    assert not marker.exists()


@pytest.mark.parametrize("name", ["parse_log_gotest", "pytest", "cargo", "multi-swe-bench:cli/cli"])
def test_parser_names_still_load(name):
    row = {**first_row("swe_bench_live"), "log_parser": name}
    assert convert_row(row, AUTO).log_parser == name


def test_an_instance_built_in_code_with_a_code_parser_fails_grading_in_one_line():
    inst = TaskInstance(
        instance_id="a__b-1", repo="a/b", problem_statement="x", image="i", fail_to_pass=["t"],
        log_parser=PARSER_CODE.format(marker="/nonexistent"), extra={"language": "go"},
    )  # fmt: skip
    with pytest.raises(NoLogParser) as exc:
        log_parser_for(inst)
    assert "\n" not in str(exc.value) and "write_text" not in str(exc.value)
