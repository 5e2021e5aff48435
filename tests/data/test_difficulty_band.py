"""swe_rl.data.difficulty_band: a pass-rate-banded slime task file, read back by the plugin's loader."""

from __future__ import annotations

import io
import json
from pathlib import Path

from swe_rl.data.difficulty_band import main
from swe_rl.data.stream_convert import convert_file
from swe_rl.tasks import instance_from_row, load_instances
from swe_rl.tasks.pass_rates import Attempt, append_attempts

FIXTURES = Path(__file__).parents[1] / "tasks" / "fixtures" / "datasets"


def test_band_keeps_sometimes_solved_and_unseen_rows_and_reports_every_drop(tmp_path, monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)
    tasks = tmp_path / "train.jsonl"
    convert_file(FIXTURES / "swe_bench_live.jsonl", tasks, fmt="swe-bench-live", progress_every=0)
    (py, rust) = [
        json.loads(line)["metadata"]["instance"]["instance_id"] for line in tasks.read_text().splitlines()
    ]
    ledger = tmp_path / "attempts.jsonl"
    append_attempts(
        ledger, [Attempt(instance_id=py, resolved=r, policy_version="v1") for r in (True, False, True)]
    )
    eval_results = tmp_path / "results.jsonl"
    eval_results.write_text(
        "".join(json.dumps({"instance_id": rust, "status": s}) + "\n" for s in ("unresolved", "no_patch"))
        + json.dumps({"instance_id": py, "status": "env_error"}) + "\n"
    )  # fmt: skip
    out = io.StringIO()
    status = main(
        ["--tasks", str(tasks), "--attempts", str(ledger), "--attempts", f"{eval_results}=v1",
         "--policy-version", "v1", "--output", str(tmp_path / "banded.jsonl")],
        out=out, err=io.StringIO(),
    )  # fmt: skip
    assert status == 0, out.getvalue()
    banded = [json.loads(line) for line in (tmp_path / "banded.jsonl").read_text().splitlines()]
    assert [r["metadata"]["instance"]["instance_id"] for r in banded] == [py]
    assert banded[0]["metadata"]["instance"]["pass_rate"] == {
        "attempts": 3, "resolved": 2, "rate": 2 / 3, "policy_version": "v1",
    }  # fmt: skip
    dropped = [json.loads(line) for line in (tmp_path / "banded.dropped.jsonl").read_text().splitlines()]
    assert dropped == [{"line": 2, "instance_id": rust, "reason": "never solved"}]
    assert "kept 1 instance(s)" in out.getvalue() and "1 x never solved" in out.getvalue()
    # the plugin reads a banded file like any task file: sample.metadata["instance"] → TaskInstance
    inst = instance_from_row(banded[0]["metadata"]["instance"])
    assert inst.instance_id == py and inst.extra["pass_rate"]["rate"] == 2 / 3
    assert load_instances(tmp_path / "banded.jsonl").ok


def test_bad_bands_and_missing_files_are_clear_errors(tmp_path):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("")
    err = io.StringIO()
    args = [
        "--tasks",
        str(tasks),
        "--attempts",
        str(tmp_path / "none.jsonl"),
        "--output",
        str(tmp_path / "o.jsonl"),
    ]
    assert main([*args, "--min-rate", "0.9", "--max-rate", "0.1"], out=io.StringIO(), err=err) == 2
    assert "above max_rate" in err.getvalue()
    assert main(args, out=io.StringIO(), err=err) == 2 and "attempts file not found" in err.getvalue()
