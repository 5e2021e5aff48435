"""bench/dataset_bench.py: every set's synthetic rows convert under the pinned swebench, and a
worker's error ends the bench with that error instead of a parent waiting forever (issue #39)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.data.stream_convert import convert_file

BENCH = Path(__file__).parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the spawned worker imports the module by this path too
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)
    import dataset_bench

    return dataset_bench


@pytest.mark.parametrize(
    "fmt", ["swe-rebench-v2", "swe-smith", "multi-swe-bench", "swe-bench-live", "swe-bench-multilingual"]
)
def test_every_sets_synthetic_rows_convert_under_the_pinned_swebench(bench, tmp_path, fmt):
    src = tmp_path / "rows.jsonl"
    bench.write_rows(fmt, 50, 1, src)
    summary = convert_file(src, tmp_path / "out.jsonl", fmt=fmt, progress_every=0)
    assert (summary.converted, summary.rejected) == (49, 1)  # 1 row in 50 is broken on purpose


@pytest.mark.slow  # spawns a fresh interpreter
def test_a_worker_that_raises_ends_the_bench_with_its_error(bench, tmp_path):
    old_row = json.loads((bench.FIXTURES / "swe_bench_multilingual.jsonl").read_text().splitlines()[0])
    src = tmp_path / "old.jsonl"  # swebench 4.x's schema: the pinned 5.x cannot convert it
    src.write_text(json.dumps(old_row) + "\n")
    with pytest.raises(bench.WorkerFailed, match="swe-convert-rows"):
        bench.measure("swe-bench-multilingual", src, tmp_path / "out.jsonl")


@pytest.mark.slow  # spawns a fresh interpreter
def test_a_worker_that_dies_without_a_word_ends_the_bench(bench, tmp_path):
    with pytest.raises(bench.WorkerFailed, match="no-such-set|died|failed"):
        bench.measure("no-such-set", tmp_path / "missing.jsonl", tmp_path / "out.jsonl")


@pytest.mark.slow  # the bench as a program
def test_the_bench_runs_a_set_end_to_end(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "dataset_bench.py"), "--rows", "20", "--sets", "swe-smith"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].startswith("swe-smith")
