"""Stage 6: the integrity verdict from the records earlier stages handed on."""

from __future__ import annotations

from swe_rl.grading.canaries.plan import CanaryCheck
from swe_rl.grading.integrity import IntegrityConfig, OfficialVerdict, TamperRecord, TamperReport
from swe_rl.grading.result import GradeResult, GradeStatus
from swe_rl.grading.scans.capabilities import CapabilityFinding, CapabilityReport
from swe_rl.grading.verdict.decide import canary_records, capability_records, integrity_verdict

OFFICIAL = OfficialVerdict(status="resolved", resolved=True, source="same_run")


def resolved() -> GradeResult:
    return GradeResult(instance_id="o__r-1", status=GradeStatus.RESOLVED, resolved=True, message="all passed")


def verdict(records: list[TamperRecord], config: IntegrityConfig | None = None) -> GradeResult:
    return integrity_verdict(
        resolved(), TamperReport(records=records), OFFICIAL, config or IntegrityConfig(), patch_given=True
    )


def test_a_clean_run_stays_resolved_with_both_verdicts():
    result = verdict([])
    assert result.resolved and result.official == OFFICIAL and result.tamper is not None


def test_capability_findings_void_or_are_noted_as_configured():
    report = CapabilityReport(
        findings=[
            CapabilityFinding(
                path="a.py", line=3, capability="sys_modules", detail="sys.modules[...]", action="void"
            ),
            CapabilityFinding(path="a.py", line=4, capability="gc", detail="gc.get_objects()", action="flag"),
            CapabilityFinding(
                path="a.py", line=5, capability="atexit", detail="atexit.register", action="ignore"
            ),
        ]
    )
    records = capability_records(report)
    assert [(r.action, r.rule) for r in records] == [("voided", "capability"), ("noted", "capability")]
    result = verdict(records)
    assert result.status is GradeStatus.UNRESOLVED and "sys_modules" in result.message
    assert verdict(records[1:]).resolved  # noted only


def test_a_tripped_canary_voids_the_reward():
    records = canary_records(CanaryCheck(tripped=True, reasons=["must-fail canary reported PASSED"]))
    assert canary_records(CanaryCheck()) == []
    result = verdict(records)
    assert not result.resolved and "canary" in result.message and result.tamper.records[0].rule == "canary"


def test_flagged_hooks_void_only_under_flag_voids():
    flagged = [TamperRecord(path="a.py", rule="runner_hook", action="flagged", reason="_pytest")]
    assert not verdict(flagged).resolved
    assert verdict(flagged, IntegrityConfig(flag_voids=False)).resolved


def test_a_patch_of_which_nothing_ran_is_unresolved_not_no_patch():
    nothing = GradeResult(instance_id="o__r-1", status=GradeStatus.NO_PATCH, resolved=False)
    dropped = [TamperRecord(path="conftest.py", rule="conftest", action="dropped", reason="")]
    result = integrity_verdict(
        nothing, TamperReport(records=dropped), OFFICIAL, IntegrityConfig(), patch_given=True
    )
    assert result.status is GradeStatus.UNRESOLVED and "nothing of the patch" in result.message
