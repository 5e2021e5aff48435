"""swe_rl.data.stream_convert and `swe-preprocess --format`: streamed conversion with rejects and images."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from swe_rl.data.preprocess_swe_dataset import main
from swe_rl.data.stream_convert import convert_file
from swe_rl.tasks import load_instances

FIXTURES = Path(__file__).parents[1] / "tasks" / "fixtures" / "datasets"


@pytest.fixture(autouse=True)
def _no_image_overrides(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)


def mixed_file(tmp_path: Path) -> Path:
    """Every auto-detectable fixture row, a broken line and a duplicate."""
    lines = []
    for name in ("swe_rebench_v2", "swe_smith", "multi_swe_bench", "swe_bench_live"):
        lines += (FIXTURES / f"{name}.jsonl").read_text().splitlines()
    lines += ["{not json", lines[0]]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_auto_format_converts_each_row_with_its_sets_loader_and_reports_every_reject(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    status = main(
        ["--train-data-source", str(mixed_file(tmp_path)), "--output-dir", str(tmp_path / "o"),
         "--format", "auto", "--progress-every", "2"],
        out=out, err=err,
    )  # fmt: skip
    assert status == 0, err.getvalue()
    rows = read_jsonl(tmp_path / "o" / "train.jsonl")
    sources = [r["metadata"]["data_source"] for r in rows]
    assert sources == ["SWE-rebench-V2", "SWE-smith", "Multi-SWE-bench", "SWE-bench-Live", "SWE-bench-Live"]
    rejects = read_jsonl(tmp_path / "o" / "train.rejects.jsonl")
    reasons = {r["instance_id"]: r["reason"] for r in rejects}
    assert len(rejects) == 4  # one bad per set fixture, the broken line, the duplicate
    assert "all empty" in reasons["cli__cli-10044"] and "test_cmds is empty" in reasons["amoffat__sh-746"]
    assert any(r["reason"].startswith("invalid JSON") for r in rejects)
    assert "duplicate instance_id" in reasons["unidata__netcdf-c-1925"]
    images = (tmp_path / "o" / "train.images.txt").read_text().splitlines()
    assert images == sorted({r["metadata"]["instance"]["image_name"] for r in rows})
    assert "train: wrote 5 instance(s)" in out.getvalue() and "4 rejected" in out.getvalue()
    assert "rows/s)" in err.getvalue() and "rejected 4 row(s), by reason" in err.getvalue()
    reloaded = load_instances(tmp_path / "o" / "train.jsonl")
    assert reloaded.ok and [i.log_parser for i in reloaded.instances][:2] == [
        "parse_log_jq",
        "pytest",
    ]


def test_a_named_format_rejects_rows_of_another_schema_with_the_reason(tmp_path):
    summary = convert_file(
        FIXTURES / "swe_smith.jsonl", tmp_path / "t.jsonl", fmt="swe-rebench-v2", progress_every=0
    )
    assert summary.converted == 0 and summary.rejected == 1
    assert "install_config must be an object" in next(iter(summary.reasons))


def test_parquet_is_streamed_in_batches(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = read_jsonl(FIXTURES / "swe_bench_live.jsonl")
    common = sorted(set.intersection(*(set(r) for r in rows)))
    table = pa.Table.from_pylist(
        [{k: json.dumps(r[k]) if isinstance(r[k], dict) else r[k] for k in common} for r in rows]
    )
    pq.write_table(table, tmp_path / "live.parquet")
    summary = convert_file(tmp_path / "live.parquet", tmp_path / "t.jsonl", fmt="swe-bench-live", limit=1)
    assert summary.converted == 1 and summary.rows_read == 1


def test_streaming_needs_a_local_file(tmp_path):
    err = io.StringIO()
    status = main(
        ["--train-data-source", "org/some-hub-set", "--output-dir", str(tmp_path), "--format", "swe-smith"],
        out=io.StringIO(), err=err,
    )  # fmt: skip
    assert status == 1 and "streams local .jsonl/.parquet files" in err.getvalue()
