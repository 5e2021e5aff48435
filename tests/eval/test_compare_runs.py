"""eval/compare_runs.py on two recorded runs: one of our eval, one of mini-swe-agent graded by us."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from swe_rl.eval import compare_runs
from tests.conftest import ROOT

OURS = {
    "a__x-1": "resolved",
    "a__x-2": "resolved",
    "a__x-3": "no_patch",
    "a__x-4": "unresolved",
    "a__x-5": "env_error",
}
MINI = {
    "a__x-1": "resolved",
    "a__x-2": "patch_apply_failed",
    "a__x-3": "resolved",
    "a__x-4": "unresolved",
    "a__x-6": "no_patch",
}


def record(run: Path, statuses: dict[str, str], run_info: dict) -> Path:
    run.mkdir()
    rows = [
        {"instance_id": i, "status": s, "resolved": s == "resolved", "steps": 3} for i, s in statuses.items()
    ]
    # a superseded row first: the last row per instance counts, as in report.py
    lines = [json.dumps({"instance_id": "a__x-1", "status": "env_error"})] + [json.dumps(r) for r in rows]
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    (run / "run.json").write_text(json.dumps(run_info))
    return run


def test_two_recorded_runs_instance_by_instance(tmp_path, capsys):
    a = record(tmp_path / "ours", OURS, {"model": "openai/Qwen3-32B", "policy": "chat"})
    b = record(tmp_path / "mini", MINI, {"model": "openai/Qwen3-32B", "harness": "mini-swe-agent"})

    c = compare_runs.compare(a, b)
    assert c["common"] == 4 and c["only_in_a"] == ["a__x-5"] and c["only_in_b"] == ["a__x-6"]
    assert (
        c["both_resolved"] == 1 and c["only_a_resolved"] == ["a__x-2"] and c["only_b_resolved"] == ["a__x-3"]
    )
    assert c["neither_resolved"] == 1
    assert c["status_differs"] == [
        {"instance_id": "a__x-2", "a": "resolved", "b": "patch_apply_failed"},
        {"instance_id": "a__x-3", "a": "no_patch", "b": "resolved"},
    ]
    assert c["a"]["all"]["resolve_rate"] == 0.4 and c["b"]["all"]["resolve_rate"] == 0.4
    assert c["a"]["common"]["resolve_rate"] == 0.5 and c["a"]["common"]["no_patch_rate"] == 0.25
    assert c["b"]["common"]["patch_apply_failed_rate"] == 0.25

    assert compare_runs.main([str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "openai/Qwen3-32B (swe-rl eval)" in text and "openai/Qwen3-32B (mini-swe-agent)" in text
    for line in ("resolve rate", "no-patch rate", "patch-apply-failed rate"):
        assert line in text
    assert "a__x-2  resolved -> patch_apply_failed" in text and "a__x-3  no_patch -> resolved" in text
    assert "resolved by both: 1, only A: 1, only B: 1, neither: 1" in text


def test_json_output_and_exit_codes(tmp_path):
    a = record(tmp_path / "a", OURS, {})
    b = record(tmp_path / "b", OURS, {})
    p = subprocess.run(
        [sys.executable, str(ROOT / "eval/compare_runs.py"), str(a / "results.jsonl"), str(b), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status_differs"] == [] and out["common"] == 5 and "meta" not in out["a"]["all"]
    p = subprocess.run(
        [sys.executable, str(ROOT / "eval/compare_runs.py"), str(a), str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 2 and "no results.jsonl" in p.stderr
