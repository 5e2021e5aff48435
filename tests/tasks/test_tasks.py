"""Task instances: row formats, bad rows, loaders, image names, eval scripts."""

from __future__ import annotations

import json
import socket
import sys
import types
from pathlib import Path

import pytest

from swe_rl.tasks import (
    DataSource,
    EvalSpecUnavailable,
    RowInvalid,
    TaskInstance,
    eval_script_for,
    image_for,
    instance_from_row,
    load_instances,
)

TEST_PATCH = """\
diff --git a/tests/test_requests.py b/tests/test_requests.py
--- a/tests/test_requests.py
+++ b/tests/test_requests.py
@@ -1,1 +1,2 @@
 import requests
+import pytest
"""


def swebench_row(**over) -> dict:
    """A SWE-bench row as the dataset stores it: test lists JSON-encoded."""
    row = {
        "repo": "psf/requests",
        "instance_id": "psf__requests-2317",
        "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "patch": "diff --git a/requests/sessions.py b/requests/sessions.py\n",
        "test_patch": TEST_PATCH,
        "problem_statement": "method = builtin_str(method) problem",
        "hints_text": "",
        "created_at": "2014-11-01T02:20:16Z",
        "version": "2.4",
        "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
        "PASS_TO_PASS": '["test_requests.py::RequestsTestCase::test_basic_building"]',
        "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
    }
    row.update(over)
    return row


def fixture_row(**over) -> dict:
    """A row of data/fixtures/instances.jsonl: SWE-bench fields plus image and eval script."""
    row = {
        "instance_id": "pytoolz__toolz-9001",
        "repo": "pytoolz/toolz",
        "base_commit": "abc123",
        "problem_statement": "partition_all drops the tail",
        "patch": "diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py\n",
        "test_patch": "",
        "FAIL_TO_PASS": ["toolz/tests/test_itertoolz.py::test_partition_all"],
        "PASS_TO_PASS": ["toolz/tests/test_itertoolz.py::test_remove"],
        "version": "0.12",
        "image_name": "swe-rl/fixture-pytoolz__toolz-9001:latest",
        "eval_script": "#!/bin/bash\ncd /testbed && pytest -rA\n",
        "workdir": "/testbed",
        "data_source": "swe-rl-fixtures",
    }
    row.update(over)
    return row


def r2e_row(**over) -> dict:
    commit = {
        "file_diffs": [],
        "old_commit_hash": "1111111111111111111111111111111111111111",
        "new_commit_hash": "2222222222222222222222222222222222222222",
        "commit_message": "BUG: fix to_csv na_rep",
        "commit_date": "2020-01-01T00:00:00",
        "metadata": {},
    }
    row = {
        "repo_name": "pandas",
        "docker_image": "namanjain12/pandas_final:2222222222222222222222222222222222222222",
        "commit_hash": "2222222222222222222222222222222222222222",
        "parsed_commit_content": json.dumps(commit),
        "execution_result_content": "{}",
        "modified_files": ["pandas/io/formats/csvs.py"],
        "relevant_files": [],
        "num_non_test_files": 1,
        "prompt": "...",
        "problem_statement": "[ISSUE]to_csv ignores na_rep[/ISSUE]",
        "expected_output_json": json.dumps({"TestFrame.test_to_csv_na": "PASSED"}),
    }
    row.update(over)
    return row


def write_jsonl(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


# ---------------------------------------------------------------------------- rows


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


# ---------------------------------------------------------------------------- images


def test_image_templates_and_prefixes(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)
    row = {"instance_id": "django__django-11099", "repo": "django/django"}
    assert image_for(row) == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert image_for(row, source="swe-gym") == "xingyaoww/sweb.eval.x86_64.django_s_django-11099:latest"
    assert image_for(row, override="reg:5000/sweb.eval.x86_64.{id_swebench}:v2") == (
        "reg:5000/sweb.eval.x86_64.django_1776_django-11099:v2"
    )
    assert image_for(row, override="{repo}|{instance_id}|{id_swegym}") == (
        "django/django|django__django-11099|django_s_django-11099"
    )
    assert image_for(row, override="mirror.local:5000/swebench") == (
        "mirror.local:5000/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert image_for({**row, "image_name": "own/image:1"}) == "own/image:1"
    with pytest.raises(ValueError, match="unknown placeholder"):
        image_for(row, override="x/{nope}")


def test_image_override_from_environment(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.setenv("SWE_IMAGE_PREFIX", "mirror.local:5000/swebench/")
    inst = instance_from_row(swebench_row())
    assert inst.image == "mirror.local:5000/swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    monkeypatch.setenv("SWE_IMAGE_TEMPLATE", "local/{id_swebench}")
    assert image_for(inst) == "local/psf_1776_requests-2317"


# ---------------------------------------------------------------------------- loading


def test_jsonl_bad_rows_are_reported_and_the_rest_load(tmp_path):
    path = tmp_path / "instances.jsonl"
    write_jsonl(
        path,
        [
            fixture_row(),
            '{"instance_id": "broken", ',
            "",
            swebench_row(instance_id="psf__requests-1", repo=None),
            swebench_row(instance_id=7),
            [1, 2],
            swebench_row(),
            fixture_row(),
        ],
    )
    result = load_instances(path)
    assert [i.instance_id for i in result.instances] == ["pytoolz__toolz-9001", "psf__requests-2317"]
    errs = {e.line: e for e in result.errors}
    assert set(errs) == {2, 4, 5, 6, 8}
    assert "invalid JSON" in errs[2].message and errs[2].instance_id is None
    assert errs[4].instance_id == "psf__requests-1" and "'repo'" in errs[4].message
    assert "instance_id" in errs[5].message
    assert "JSON object" in errs[6].message
    assert "duplicate" in errs[8].message and "line 1" in errs[8].message
    assert str(errs[4]).startswith("line 4 (psf__requests-1): ")
    assert not result.ok


def test_json_list_and_instances_dict(tmp_path):
    rows = [swebench_row(), fixture_row()]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.json").write_text(json.dumps({"instances": rows + [{"repo": "x"}]}))
    a, b = load_instances(tmp_path / "a.json"), load_instances(tmp_path / "b.json")
    assert a.instances == b.instances and len(a.instances) == 2 and a.ok
    assert [(e.index, e.line) for e in b.errors] == [(2, None)]


def test_limit_and_instance_ids(tmp_path):
    path = tmp_path / "i.jsonl"
    ids = [f"psf__requests-{n}" for n in range(5)]
    write_jsonl(path, [swebench_row(instance_id=i) for i in ids] + ['{"bad'])
    assert [i.instance_id for i in load_instances(path, limit=2).instances] == ids[:2]
    picked = load_instances(path, instance_ids=[ids[3], ids[1], "nope"], limit=5)
    assert [i.instance_id for i in picked.instances] == [ids[1], ids[3]]
    assert picked.missing_ids == ["nope"]
    assert len(picked.errors) == 1  # the bad line's id is unknown, so it is still reported
    assert load_instances(path, instance_ids=[ids[0]], limit=1).ok


def test_image_template_and_data_source_apply_to_every_row(tmp_path):
    path = tmp_path / "gym.jsonl"
    write_jsonl(path, [swebench_row(instance_id="getmoto__moto-1", repo="getmoto/moto")])
    res = load_instances(path, data_source="SWE-Gym", image_template="m:5000/gym")
    assert res.instances[0].image == "m:5000/gym/sweb.eval.x86_64.getmoto_s_moto-1:latest"


def test_parquet_with_pyarrow_and_with_pandas_only(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    gym = swebench_row(FAIL_TO_PASS=["t::a"], PASS_TO_PASS=[], image_name=None, eval_script=None)
    gym.update(workdir=None, data_source=None)
    rows = [fixture_row(), gym, fixture_row(instance_id="x__y-1", problem_statement=None)]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    res = load_instances(path)
    assert [i.instance_id for i in res.instances] == ["pytoolz__toolz-9001", "psf__requests-2317"]
    assert res.instances[0].fail_to_pass == ["toolz/tests/test_itertoolz.py::test_partition_all"]
    assert [(e.index, e.instance_id) for e in res.errors] == [(2, "x__y-1")]

    pd = pytest.importorskip("pandas")
    frame = pd.read_parquet(path)  # list columns come back as numpy arrays, nulls as None/NaN
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # force the pandas path
    monkeypatch.setitem(sys.modules, "pandas", types.SimpleNamespace(read_parquet=lambda p: frame))
    via_pandas = load_instances(path)
    assert via_pandas.instances == res.instances and len(via_pandas.errors) == 1

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="needs pyarrow"):
        load_instances(path)


def test_dataset_names_use_the_datasets_package_when_installed(monkeypatch, tmp_path):
    calls = []

    def load_dataset(name, split):
        calls.append((name, split))
        return [swebench_row(), {"instance_id": "z"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    res = load_instances("princeton-nlp/SWE-bench_Verified", split="test")
    assert calls == [("princeton-nlp/SWE-bench_Verified", "test")]
    assert len(res.instances) == 1 and res.errors[0].index == 1
    load_instances("hf:SWE-Gym/SWE-Gym", split="train")
    assert calls[-1] == ("SWE-Gym/SWE-Gym", "train")

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(FileNotFoundError, match="'datasets' package"):
        load_instances("some/dataset")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_instances(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------------- eval scripts


@pytest.fixture
def offline(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_swebench_generates_the_eval_script_offline(offline):
    pytest.importorskip("swebench")
    from swebench.harness.test_spec.test_spec import make_test_spec

    inst = instance_from_row(swebench_row())
    script = eval_script_for(inst)
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
    assert "git apply -v - <<'EOF_114329324912'" in script and TEST_PATCH in script
    assert ": '>>>>> Start Test Output'\npytest -rA tests/test_requests.py\n" in script
    # psf/requests needs no downloads, so the full official TestSpec agrees byte for byte
    assert script == make_test_spec(swebench_row()).eval_script


def test_eval_script_for_a_repo_whose_full_spec_would_download(offline):
    pytest.importorskip("swebench")
    row = swebench_row(
        instance_id="django__django-11099", repo="django/django", version="3.0",
        test_patch=TEST_PATCH.replace("tests/test_requests.py", "tests/auth_tests/test_validators.py"),
    )  # fmt: skip
    script = eval_script_for(instance_from_row(row))
    assert "./tests/runtests.py --verbosity 2" in script and "auth_tests.test_validators" in script


def test_eval_spec_unavailable_is_clear(monkeypatch):
    pytest.importorskip("swebench")
    with pytest.raises(EvalSpecUnavailable, match="unknown to swebench"):
        eval_script_for(instance_from_row(swebench_row(repo="getmoto/moto")))
    with pytest.raises(EvalSpecUnavailable, match="no specs for psf/requests version '9.9'"):
        eval_script_for(instance_from_row(swebench_row(version="9.9")))
    with pytest.raises(EvalSpecUnavailable, match="could not build"):
        eval_script_for(instance_from_row(swebench_row(test_patch="diff --git a/x b/x\n@@ -1,5 +1,5 @@\n")))


def test_without_swebench_only_rows_with_scripts_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "swebench.harness.constants", None)
    with pytest.raises(EvalSpecUnavailable, match="pip install"):
        eval_script_for(instance_from_row(swebench_row()))
    assert eval_script_for(instance_from_row(fixture_row())).startswith("#!/bin/bash")


def test_r2e_eval_script_runs_the_image_tests():
    script = eval_script_for(instance_from_row(r2e_row()))
    assert "ln -s /r2e_tests /testbed/r2e_tests" in script
    assert "bash /testbed/run_tests.sh" in script and ">>>>> Start Test Output" in script


def test_task_instance_is_a_plain_typed_model():
    inst = TaskInstance(
        instance_id="a__b-1", repo="a/b", problem_statement="p", image="img",
        fail_to_pass='["t1"]',
    )  # fmt: skip
    assert inst.fail_to_pass == ["t1"] and inst.has_test_lists and inst.source is DataSource.SWEBENCH


def test_the_repository_fixture_instances_load_cleanly():
    path = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "instances.jsonl"
    if not path.is_file():
        pytest.skip("data/fixtures/instances.jsonl not present")
    result = load_instances(path)
    assert result.ok and result.instances
    for inst in result.instances:
        assert inst.source is DataSource.FIXTURES and inst.has_test_lists
        assert eval_script_for(inst) == inst.eval_script
