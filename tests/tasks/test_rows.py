"""Rows of every format become one `TaskInstance`; bad rows raise a clear `RowInvalid` (swe_rl.tasks.rows)."""

from __future__ import annotations

import json

import pytest
from task_rows import fixture_row, r2e_row, swebench_row

from swe_rl.tasks import (
    DataSource,
    RowInvalid,
    TaskInstance,
    eval_script_for,
    instance_from_row,
)


def test_swebench_row_decodes_json_test_lists_and_keeps_extra_fields():
    inst = instance_from_row(swebench_row())
    assert inst.fail_to_pass == ["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]
    assert inst.pass_to_pass == ["test_requests.py::RequestsTestCase::test_basic_building"]
    assert inst.source is DataSource.SWEBENCH
    assert inst.image == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert inst.extra["hints_text"] == "" and "environment_setup_commit" in inst.extra
    assert inst.workdir == "/testbed" and inst.eval_script is None


def test_list_and_string_encodings_give_the_same_instance():
    as_lists = swebench_row(
        FAIL_TO_PASS=json.loads(swebench_row()["FAIL_TO_PASS"]),
        PASS_TO_PASS=json.loads(swebench_row()["PASS_TO_PASS"]),
    )
    assert instance_from_row(as_lists) == instance_from_row(swebench_row())


def test_swegym_row_gets_the_swegym_image():
    inst = instance_from_row(
        swebench_row(instance_id="getmoto__moto-5752", repo="getmoto/moto", version="4.0"),
        data_source="SWE-Gym/SWE-Gym",
    )
    assert inst.source is DataSource.SWEGYM
    assert inst.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest"
    assert inst.data_source == "SWE-Gym/SWE-Gym"


def test_fixture_row_keeps_its_image_and_eval_script():
    inst = instance_from_row(fixture_row())
    assert inst.source is DataSource.FIXTURES
    assert inst.image == "swe-rl/fixture-pytoolz__toolz-9001:latest"
    assert eval_script_for(inst) == "#!/bin/bash\ncd /testbed && pytest -rA\n"


def test_r2e_row_is_recognised_by_its_fields():
    inst = instance_from_row(r2e_row())
    assert inst.source is DataSource.R2EGYM
    assert inst.instance_id == "pandas__pandas-2222222222222222222222222222222222222222"
    assert inst.repo == "pandas"
    assert inst.base_commit == "1111111111111111111111111111111111111111"
    assert inst.image == "namanjain12/pandas_final:2222222222222222222222222222222222222222"
    assert inst.expected_statuses == {"TestFrame.test_to_csv_na": "PASSED"}
    assert "parsed_commit_content" in inst.extra and not inst.has_test_lists


def test_r2e_image_name_field_and_named_source():
    row = r2e_row(image_name="r2e/pandas:abc")
    del row["docker_image"]
    inst = instance_from_row(row, data_source="R2E-Gym/R2E-Gym-Lite")
    assert inst.image == "r2e/pandas:abc" and inst.source is DataSource.R2EGYM


def test_slime_row_is_unwrapped():
    row = {
        "text": "prompt text",
        "label": "",
        "metadata": {"instance": swebench_row(), "data_source": "princeton-nlp/SWE-bench_Verified"},
    }
    inst = instance_from_row(row)
    assert inst.instance_id == "psf__requests-2317"
    assert inst.data_source == "princeton-nlp/SWE-bench_Verified"
    assert "text" not in inst.extra


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({k: v for k, v in swebench_row().items() if k != "repo"}, "missing required field 'repo'"),
        ({k: v for k, v in swebench_row().items() if k != "instance_id"}, "'instance_id'"),
        (swebench_row(FAIL_TO_PASS="[not json"), "not a JSON list"),
        (swebench_row(PASS_TO_PASS={"a": 1}), "expected a list"),
        (swebench_row(problem_statement=42), "problem_statement"),
        (swebench_row(version=3.1), "'version' must be a string"),
        ({"text": "x", "metadata": {"instance": "oops"}}, "metadata.instance must be an object"),
    ],
)
def test_bad_rows_raise_a_clear_error(row, needle):
    with pytest.raises(RowInvalid) as exc:
        instance_from_row(row)
    assert needle in str(exc.value)


def test_data_source_detection():
    assert DataSource.detect("SWE-Gym/SWE-Gym") is DataSource.SWEGYM
    assert DataSource.detect("R2E-Gym/R2E-Gym-Subset") is DataSource.R2EGYM
    assert DataSource.detect("swe-rl-fixtures") is DataSource.FIXTURES
    assert DataSource.detect("princeton-nlp/SWE-bench_Verified") is DataSource.SWEBENCH
    assert DataSource.detect(None) is DataSource.SWEBENCH


def test_task_instance_is_a_plain_typed_model():
    inst = TaskInstance(
        instance_id="a__b-1", repo="a/b", problem_statement="p", image="img",
        fail_to_pass='["t1"]',
    )  # fmt: skip
    assert inst.fail_to_pass == ["t1"] and inst.has_test_lists and inst.source is DataSource.SWEBENCH
