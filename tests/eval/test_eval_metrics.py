"""The standalone eval shows the training dashboard's figures, same names (summary.json "metrics",
report.html), from the rows of a real run on the local fleet."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from swe_rl.eval import eval_swe
from swe_rl.eval.report_metrics import run_metrics
from swe_rl.fleet.local import LocalFleet
from swe_rl.metrics.rollout import percentile
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"


def test_summary_and_report_carry_the_dashboard_figures(docker_client, base_image, tmp_path: Path):
    ids = [json.loads(line)["instance_id"] for line in FIXTURES.read_text().splitlines() if line.strip()][:2]
    with LocalFleet(exec_servers=1, max_containers_per_node=4) as fleet:
        args = eval_swe.parse_args(
            [
                "--data",
                str(FIXTURES),
                "--output-dir",
                str(tmp_path),
                "--policy",
                "gold",
                "--instance-ids",
                ",".join(ids),
                "--no-progress",
            ]
        )
        summary = asyncio.run(eval_swe.run(args, fleet.client_env()))
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    m = summary["metrics"]
    assert m == run_metrics(rows) == json.loads((tmp_path / "summary.json").read_text())["metrics"]
    # by hand from the rows: gold resolves both, in the turns its episodes recorded
    turns = [r["episode"]["turns"] for r in rows]
    assert m["trajectories"] == 2 and m["outcome/resolved_rate"] == 1.0 and m["outcome/count/resolved"] == 2
    assert m["behaviour/turns_mean"] == round(sum(turns) / 2, 4) and m["behaviour/turns_max"] == max(turns)
    assert m["behaviour/exit/submitted_rate"] == 1.0 and m["behaviour/format_error_rate"] == 0.0
    assert m["infra/grade_seconds_p90"] == percentile([r["episode"]["grade_seconds"] for r in rows], 90)
    assert m["infra/allocate_seconds_p50"] > 0 and m["infra/warm_hit_rate"] == 0.0
    assert all(r["data_source"] and r["episode"]["allocate_seconds"] > 0 for r in rows)
    assert "outcome/groups" not in m and "removed_rate" in m
    page = (tmp_path / "report.html").read_text()
    assert "Dashboard figures" in page and "outcome/resolved_rate" in page
