"""swe-convert-rows (swe_rl.data.convert_rows): older rows get swebench 5.x's fields, once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from swe_rl.data.convert_rows import convert_row, main
from swe_rl.grading import ApplyStatus, GradeStatus, grade
from swe_rl.tasks import eval_script_for, instance_from_row

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from task_rows import fixture_row, swebench_row


def test_an_older_swebench_row_gets_script_parser_type_and_image(swebench_4):
    row = swebench_row()
    out = convert_row(row)
    assert out["eval_script"] == eval_script_for(instance_from_row(row))
    assert out["log_parser"] == "parse_log_requests" and out["eval_type"] == "pass_and_fail"
    assert out["image"] == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert {k: out[k] for k in row} == row  # the row's own fields verbatim
    again = instance_from_row(out)  # and the converted row grades under 5.x's rules as before
    log = ">>>>> Start Test Output\nPASSED test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE\n"
    log += "PASSED test_requests.py::RequestsTestCase::test_basic_building\n>>>>> End Test Output\n"
    r = grade(again, patch="p", apply_status=ApplyStatus.APPLIED, test_log=log)
    assert r.status is GradeStatus.RESOLVED and r.method == "builtin-log-parser:parse_log_requests"


def test_rows_with_the_fields_are_copied_and_short_parser_names_get_5x_names():
    row = fixture_row(log_parser="pytest")
    out = convert_row(row)
    assert out["eval_script"] == row["eval_script"] and out["log_parser"] == "parse_log_pytest"
    named = fixture_row(log_parser="parse_log_pytest_v2", eval_type="fail_only", image="x:1")
    assert convert_row(named) == named


def test_the_tool_reports_every_row_it_leaves_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "swebench.harness.constants", None)  # as under swebench 5.x
    src, dst = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    go = fixture_row(instance_id="go__x-1", repo="go/x", language="go")
    lines = [json.dumps(fixture_row()), json.dumps(swebench_row()), "{bad", json.dumps(go)]
    src.write_text("\n".join(lines) + "\n")
    assert main(["--here", str(src), str(dst)]) == 1  # in this process, where 4.x is not importable
    err = capsys.readouterr().err
    assert "line 2:" in err and "swe-convert-rows" in err and "line 3:" in err
    assert "line 4:" in err and "names no log_parser" in err
    assert "1 row(s) converted, 3 left out" in err
    [only] = [json.loads(x) for x in dst.read_text().splitlines()]
    assert only["instance_id"] == "pytoolz__toolz-9001" and only["log_parser"] == "parse_log_pytest"
