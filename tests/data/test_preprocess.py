"""data/preprocess_swe_dataset.py: task rows -> slime JSONL that loads back to the same instances.

The CLI runs as a subprocess on local files (SWE-bench, SWE-Gym, R2E-Gym, fixture rows).
The hub path is exercised with the real `datasets` package: offline it must fail with a
clear message, and with only `load_dataset` replaced by a local `datasets.Dataset` the
rows must convert like local ones.
"""

from __future__ import annotations

import json

import pytest
from row_factories import (
    FIXTURE_INSTANCES,
    load_tool,
    r2e_row,
    read_jsonl,
    run_tool,
    swebench_row,
    swegym_row,
    write_jsonl,
)

from swe_rl.tasks import DataSource, load_instances
from tests.swebench_versions import side_folder

pytestmark = pytest.mark.slow  # runs the tool as a subprocess, as users do

TOOL = "preprocess_swe_dataset.py"
INSTANCE_KEYS = {
    "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
    "FAIL_TO_PASS", "PASS_TO_PASS", "version", "image_name", "workdir", "data_source",
}  # fmt: skip


# rows of the 4.x schema (no eval_script) are converted with swebench 4.1.0 from its own folder
# (swe_rl.tasks.swebench4); the set-up puts it there (scripts/install_package.sh)
needs_swebench4 = pytest.mark.skipif(
    not (side_folder() / "swebench" / "__init__.py").is_file(),
    reason=f"swebench 4.1.0 is not in {side_folder()} (bash scripts/install_package.sh puts it there)",
)


@pytest.fixture(autouse=True)
def _no_image_overrides(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)


def convert(tmp_path, *args: str):
    out = tmp_path / "out"
    proc = run_tool(TOOL, "--output-dir", out, *args)
    return proc, out


def test_fixture_instances_become_slime_rows_that_load_back_unchanged(tmp_path):
    proc, out = convert(tmp_path, "--train-data-source", FIXTURE_INSTANCES)
    assert proc.returncode == 0, proc.stderr
    original = load_instances(FIXTURE_INSTANCES).instances
    assert f"train: wrote {len(original)} instance(s)" in proc.stdout and proc.stderr == ""

    rows = read_jsonl(out / "train.jsonl")
    assert len(rows) == len(original) >= 4
    for row, inst in zip(rows, original):
        assert set(row) == {"text", "metadata"}
        assert row["text"] == inst.problem_statement
        assert row["metadata"]["data_source"] == "swe-rl-fixtures"
        record = row["metadata"]["instance"]
        assert INSTANCE_KEYS | {"eval_script"} <= set(record)
        assert record["image_name"] == inst.image
        assert isinstance(record["FAIL_TO_PASS"], list) and record["FAIL_TO_PASS"] == inst.fail_to_pass
        assert record["eval_script"] == inst.eval_script and record["workdir"] == "/testbed"
        assert record["environment_setup_commit"] == inst.extra["environment_setup_commit"]

    reloaded = load_instances(out / "train.jsonl")
    assert reloaded.ok and reloaded.instances == original
    assert not (out / "val.jsonl").exists()


def test_converting_slime_output_again_gives_the_same_file(tmp_path):
    proc, out = convert(tmp_path, "--train-data-source", FIXTURE_INSTANCES)
    assert proc.returncode == 0
    again = run_tool(TOOL, "--train-data-source", out / "train.jsonl", "--output-dir", tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "train.jsonl").read_text() == (out / "train.jsonl").read_text()


@needs_swebench4
def test_swebench_rows_with_bad_rows_are_reported_and_skipped(tmp_path):
    src = write_jsonl(
        tmp_path / "swebench.jsonl",
        [
            swebench_row("psf__requests-1"),
            '{"instance_id": "broken", ',
            swebench_row("psf__requests-2", repo=None),
            swebench_row("psf__requests-3", FAIL_TO_PASS="[not json"),
            swebench_row("psf__requests-4", version=2.4),
            swebench_row("psf__requests-5"),
            swebench_row("psf__requests-1"),
        ],
    )
    proc, out = convert(tmp_path, "--train-data-source", src)
    assert proc.returncode == 0, proc.stderr
    assert "train: wrote 2 instance(s)" in proc.stdout and "5 bad row(s) skipped" in proc.stdout
    err = proc.stderr.splitlines()
    assert err[0] == "train: skipped 5 bad row(s):"
    assert err[1].startswith("  line 2: invalid JSON")
    assert err[2].startswith("  line 3 (psf__requests-2): missing required field 'repo'")
    assert "not a JSON list" in err[3] and "'version' must be a string" in err[4]
    assert "line 7 (psf__requests-1): duplicate instance_id (first at line 1)" in err[5]

    rows = read_jsonl(out / "train.jsonl")
    assert [r["metadata"]["instance"]["instance_id"] for r in rows] == ["psf__requests-1", "psf__requests-5"]
    record = rows[0]["metadata"]["instance"]
    assert record["image_name"] == "swebench/sweb.eval.x86_64.psf_1776_requests-1:latest"
    assert record["FAIL_TO_PASS"] == ["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]
    assert record["hints_text"] == "see #2316"
    # a 4.x-schema row: converted in the same run with swebench 4.1.0 (its eval script, 5.x's fields)
    assert "conda activate testbed" in record["eval_script"] and record["log_parser"] == "parse_log_requests"
    assert "1 row(s) could not be converted" not in proc.stderr
    assert rows[0]["metadata"]["data_source"] == "swe-bench"
    back, source = load_instances(out / "train.jsonl").instances, load_instances(src).instances
    fields = {"eval_script", "log_parser", "eval_type", "extra"}
    assert [i.model_dump(exclude=fields) for i in back] == [i.model_dump(exclude=fields) for i in source]


def test_only_the_first_errors_are_listed(tmp_path):
    src = write_jsonl(tmp_path / "many.jsonl", [swebench_row()] + ['{"bad'] * 14)
    proc, _ = convert(tmp_path, "--train-data-source", src)
    assert proc.returncode == 0
    assert "skipped 14 bad row(s)" in proc.stderr and "... and 4 more" in proc.stderr
    assert proc.stderr.count("invalid JSON") == 10


def test_nothing_converted_is_an_error_and_writes_nothing(tmp_path):
    src = write_jsonl(tmp_path / "bad.jsonl", ['{"bad', {"repo": "x/y"}])
    proc, out = convert(tmp_path, "--train-data-source", src)
    assert proc.returncode == 1
    assert "skipped 2 bad row(s)" in proc.stderr and "no instance converted" in proc.stderr
    assert not (out / "train.jsonl").exists()


@needs_swebench4
def test_swegym_json_file_named_by_data_source_gets_swegym_images(tmp_path):
    src = tmp_path / "swegym.json"
    src.write_text(json.dumps([swegym_row(), swegym_row("python__mypy-15413", repo="python/mypy")]))
    proc, out = convert(tmp_path, "--train-data-source", src, "--data-source-name", "SWE-Gym/SWE-Gym")
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(out / "train.jsonl")
    assert [r["metadata"]["instance"]["image_name"] for r in rows] == [
        "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest",
        "xingyaoww/sweb.eval.x86_64.python_s_mypy-15413:latest",
    ]
    assert {r["metadata"]["data_source"] for r in rows} == {"SWE-Gym/SWE-Gym"}
    loaded = load_instances(out / "train.jsonl").instances
    assert loaded == load_instances(src, data_source="SWE-Gym/SWE-Gym").instances
    assert all(i.source is DataSource.SWEGYM for i in loaded)


def test_r2e_parquet_keeps_image_and_expected_statuses(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [
        r2e_row(),
        r2e_row("3333333333333333333333333333333333333333"),
        r2e_row(repo_name=None, docker_image=None),
    ]
    src = tmp_path / "r2e.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    proc, out = convert(tmp_path, "--train-data-source", src, "--data-source-name", "R2E-Gym/R2E-Gym-Lite")
    assert proc.returncode == 0, proc.stderr
    assert "skipped 1 bad row(s)" in proc.stderr and "row 2" in proc.stderr

    written = read_jsonl(out / "train.jsonl")
    record = written[0]["metadata"]["instance"]
    assert record["instance_id"] == "pandas__pandas-2222222222222222222222222222222222222222"
    assert record["image_name"] == "namanjain12/pandas_final:2222222222222222222222222222222222222222"
    assert record["base_commit"] == "1111111111111111111111111111111111111111"
    assert record["expected_statuses"] == {"pandas/tests/io/test_csv.py::test_na_rep": "PASSED"}
    loaded = load_instances(out / "train.jsonl").instances
    assert loaded == load_instances(src, data_source="R2E-Gym/R2E-Gym-Lite").instances
    assert loaded[1].source is DataSource.R2EGYM and loaded[1].expected_statuses


@needs_swebench4
def test_val_split_limit_and_instance_ids(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", [swebench_row(f"psf__requests-{n}") for n in range(6)])
    val = write_jsonl(
        tmp_path / "v.jsonl", [swebench_row(f"pallets__flask-{n}", repo="pallets/flask") for n in range(3)]
    )
    proc, out = convert(tmp_path, "--train-data-source", train, "--val-data-source", val, "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    assert "train: wrote 2" in proc.stdout and "val: wrote 2" in proc.stdout
    assert [r["metadata"]["instance"]["instance_id"] for r in read_jsonl(out / "val.jsonl")] == [
        "pallets__flask-0", "pallets__flask-1",
    ]  # fmt: skip

    proc, out = convert(tmp_path, "--train-data-source", train, "--val-data-source", val,
                        "--instance-ids", "psf__requests-4,pallets__flask-2,psf__requests-1,nope__nope-1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [r["metadata"]["instance"]["instance_id"] for r in read_jsonl(out / "train.jsonl")] == [
        "psf__requests-1", "psf__requests-4",
    ]  # fmt: skip
    assert len(read_jsonl(out / "val.jsonl")) == 1
    assert "1 requested instance id(s) not found: nope__nope-1" in proc.stderr

    ids = tmp_path / "ids.txt"
    ids.write_text("# wanted\npsf__requests-3\n\npsf__requests-5  # last\n")
    proc, out = convert(tmp_path, "--train-data-source", train, "--instance-ids", ids)
    assert [r["metadata"]["instance"]["instance_id"] for r in read_jsonl(out / "train.jsonl")] == [
        "psf__requests-3", "psf__requests-5",
    ]  # fmt: skip


def test_a_val_split_with_nothing_usable_fails_but_train_is_written(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", [swebench_row()])
    proc, out = convert(
        tmp_path, "--train-data-source", train, "--val-data-source", tmp_path / "missing.jsonl"
    )
    assert proc.returncode == 1
    assert (out / "train.jsonl").exists() and not (out / "val.jsonl").exists()
    assert "error: val: cannot read" in proc.stderr and "no such file" in proc.stderr


@needs_swebench4
def test_image_prefix_and_template(tmp_path):
    src = write_jsonl(tmp_path / "s.jsonl", [swebench_row("django__django-11099", repo="django/django")])
    proc, out = convert(tmp_path, "--train-data-source", src, "--image-prefix", "mirror.local:5000/swebench/")
    assert proc.returncode == 0, proc.stderr
    image = read_jsonl(out / "train.jsonl")[0]["metadata"]["instance"]["image_name"]
    assert image == "mirror.local:5000/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"

    proc, out = convert(tmp_path, "--train-data-source", src, "--image-template", "local/{id_swebench}:v2")
    assert read_jsonl(out / "train.jsonl")[0]["metadata"]["instance"]["image_name"] == (
        "local/django_1776_django-11099:v2"
    )
    # The written image name is final: loading the output needs no override.
    assert load_instances(out / "train.jsonl").instances[0].image == "local/django_1776_django-11099:v2"

    for bad in (["--image-prefix", "a", "--image-template", "b/{instance_id}"], ["--image-prefix", "x/{repo}"],
                ["--image-template", "x/{nope}"], ["--limit", "0"]):  # fmt: skip
        proc, _ = convert(tmp_path, "--train-data-source", src, *bad)
        assert proc.returncode != 0 and "error" in proc.stderr.lower(), bad


def test_unreachable_hub_dataset_fails_clearly(tmp_path):
    # Real `datasets` (or its absence) with the hub switched off: one clear line, exit 1.
    proc, out = convert(
        tmp_path, "--train-data-source", "princeton-nlp/SWE-bench_Verified", "--train-split", "test"
    )
    assert proc.returncode == 1
    assert "error: train: cannot read 'princeton-nlp/SWE-bench_Verified' (split 'test')" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@needs_swebench4
def test_hub_dataset_rows_convert_like_local_ones(tmp_path, monkeypatch, capsys):
    datasets = pytest.importorskip("datasets")
    calls = []
    rows = [swegym_row(), swegym_row("python__mypy-15413", repo="python/mypy"), swegym_row("x", repo="")]

    def load_dataset(name, split):
        calls.append((name, split))
        return datasets.Dataset.from_list(rows)  # a real Dataset, built from local rows

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    tool = load_tool(TOOL)
    code = tool.main(["--train-data-source", "SumanthRH/SWE-Gym-Subset", "--train-split", "train",
                      "--output-dir", str(tmp_path / "out")])  # fmt: skip
    assert code == 0 and calls == [("SumanthRH/SWE-Gym-Subset", "train")]
    assert "skipped 1 bad row(s)" in capsys.readouterr().err
    written = read_jsonl(tmp_path / "out" / "train.jsonl")
    assert [r["metadata"]["data_source"] for r in written] == ["SumanthRH/SWE-Gym-Subset"] * 2
    assert (
        written[0]["metadata"]["instance"]["image_name"]
        == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest"
    )
    loaded = load_instances(tmp_path / "out" / "train.jsonl").instances
    assert [i.instance_id for i in loaded] == ["getmoto__moto-5752", "python__mypy-15413"]
    assert loaded[0].fail_to_pass == rows[0]["FAIL_TO_PASS"]
