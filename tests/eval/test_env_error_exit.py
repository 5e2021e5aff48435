"""swe-eval's exit code after a run: env_error above --max-env-error-rate is exit 3 (an outage, not a score)."""

from __future__ import annotations

import json

import pytest

from swe_rl.eval import eval_swe
from swe_rl.eval.report import summarize


def finished_run(tmp_path, statuses: list[str]) -> dict:
    rows = [
        {"instance_id": f"i{n}", "status": s, "resolved": s == "resolved", "error": "PolicyUnreachable: gone"}
        for n, s in enumerate(statuses)
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return summarize(tmp_path / "results.jsonl", [r["instance_id"] for r in rows])


def args(tmp_path, *extra: str):
    return eval_swe.parse_args(["--data", "x", "--output-dir", str(tmp_path), "--policy", "noop", *extra])


def test_any_env_error_fails_the_run_by_default(tmp_path, capsys):
    summary = finished_run(tmp_path, ["resolved"] * 9 + ["env_error"])
    assert summary["env_error_kinds"] == {"policy/PolicyUnreachable": 1}
    assert eval_swe.env_error_exit(summary, args(tmp_path)) == eval_swe.EXIT_ENV_ERROR
    assert "error: 1 of 10 instances ended in env_error" in capsys.readouterr().err


def test_a_rate_within_the_threshold_passes_with_a_warning(tmp_path, capsys):
    summary = finished_run(tmp_path, ["resolved"] * 9 + ["env_error"])
    assert eval_swe.env_error_exit(summary, args(tmp_path, "--max-env-error-rate", "0.1")) == 0
    err = capsys.readouterr().err
    assert "warning: 1 of 10 instances ended in env_error" in err and "within --max-env-error-rate" in err
    summary = finished_run(tmp_path, ["resolved"] * 8 + ["env_error"] * 2)
    assert eval_swe.env_error_exit(summary, args(tmp_path, "--max-env-error-rate", "0.1")) == 3


def test_a_clean_run_exits_0(tmp_path):
    assert eval_swe.env_error_exit(finished_run(tmp_path, ["resolved", "no_patch"]), args(tmp_path)) == 0


def test_the_threshold_is_a_fraction(tmp_path):
    with pytest.raises(SystemExit):
        args(tmp_path, "--max-env-error-rate", "2")
