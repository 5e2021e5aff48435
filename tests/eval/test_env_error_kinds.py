"""env_error counted per fault kind: in eval's summary (``env_error_kinds``) and on the dashboard
(``removed/env_error/<kind>_count``), from the reasons the fleet's failures produce (bench/chaos_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rl.eval.report import summarize
from swe_rl.metrics.env_errors import env_error_kind
from swe_rl.metrics.rollout import figures, trajectories_from_rows


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("env_error: FleetUnavailable: exec: node http://n0 is down (WireError)", "agent/FleetUnavailable"),
        ("agent environment: LeaseLost: exec: container of lease x is gone", "agent/LeaseLost"),
        (
            "grading container: LeaseLost: evaluate: container 5cbb died during the command",
            "grading/LeaseLost",
        ),
        (
            "env_error: grading container: CanonicalPatchFailed: canonical patch script failed (137)",
            "grading/CanonicalPatchFailed",
        ),
        ("the pool restarted", "agent/unknown"),
        (None, "agent/unknown"),
    ],
)
def test_env_error_kind(reason, kind):
    assert env_error_kind(reason) == kind


ROWS = [
    {"instance_id": "a", "status": "resolved", "resolved": True},
    {"instance_id": "b", "status": "env_error", "error": "FleetUnavailable: exec: node n0 is down"},
    {"instance_id": "c", "status": "env_error", "error": "FleetUnavailable: exec: the pool restarted"},
    {
        "instance_id": "d",
        "status": "env_error",
        "grade_message": "grading container: LeaseLost: evaluate: container died during the command",
    },
]


def test_the_dashboard_counts_env_error_per_kind():
    out = figures(trajectories_from_rows(ROWS))
    assert out["removed/env_error/agent_FleetUnavailable_count"] == 2.0
    assert out["removed/env_error/grading_LeaseLost_count"] == 1.0
    assert out["removed/env_error_rate"] == 0.75


def test_eval_summary_counts_env_error_per_kind(tmp_path: Path):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    summary = summarize(results)
    assert summary["env_error_kinds"] == {"agent/FleetUnavailable": 2, "grading/LeaseLost": 1}
    assert summary["status_counts"]["env_error"] == 3
