"""grade_predictions' rows carry the integrity fields, so summary.json's integrity block adds up."""

from __future__ import annotations

import json

from swe_rl.eval.grade_predictions import prediction_row, trajectory_facts
from swe_rl.eval.report import summarize
from swe_rl.grading import GradeResult, GradeStatus
from swe_rl.grading.integrity import OfficialVerdict, TamperRecord, TamperReport


def _grade(i: int) -> GradeResult:
    if i == 9:  # a conftest hack: the official harness pays, ours does not
        return GradeResult(
            instance_id=f"o__r-{i}",
            status=GradeStatus.UNRESOLVED,
            resolved=False,
            tamper=TamperReport(
                records=[TamperRecord(path="conftest.py", rule="conftest", action="dropped", reason="")]
            ),
            official=OfficialVerdict(status="resolved", resolved=True, source="full_patch_run"),
        )
    resolved = i < 8
    status = GradeStatus.RESOLVED if resolved else GradeStatus.UNRESOLVED
    return GradeResult(
        instance_id=f"o__r-{i}",
        status=status,
        resolved=resolved,
        tamper=TamperReport(),
        official=OfficialVerdict(status=status.value, resolved=resolved, source="same_run"),
    )


def test_summary_integrity_block_counts_the_official_and_integrity_verdicts(tmp_path):
    results = tmp_path / "results.jsonl"
    with results.open("w") as fh:
        for i in range(10):
            row = prediction_row(f"o__r-{i}", "diff --git a/x b/x\n", trajectory_facts(None), _grade(i), 1.0)
            fh.write(json.dumps(row) + "\n")
    row = json.loads(results.read_text().splitlines()[9])
    assert row["official_resolved"] is True and row["tamper_rules"] == ["conftest"] and row["tampered"]
    integrity = summarize(results, [f"o__r-{i}" for i in range(10)])["integrity"]
    assert integrity["official_resolve_rate"] == 0.9  # 8 resolved + the hack, officially
    assert integrity["integrity_resolve_rate"] == 0.8
    assert integrity["resolved_only_officially"] == 1 and integrity["tamper_rate"] == 0.1
