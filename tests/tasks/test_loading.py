"""Loading files and dataset names: bad rows reported, the rest load (swe_rl.tasks.loading)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from task_rows import fixture_row, swebench_row, write_jsonl

from swe_rl.tasks import (
    DataSource,
    eval_script_for,
    load_instances,
)


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


def test_the_repository_fixture_instances_load_cleanly():
    path = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "instances.jsonl"
    if not path.is_file():
        pytest.skip("data/fixtures/instances.jsonl not present")
    result = load_instances(path)
    assert result.ok and result.instances
    for inst in result.instances:
        assert inst.source is DataSource.FIXTURES and inst.has_test_lists
        assert eval_script_for(inst) == inst.eval_script
