"""Stage 6 of the grading pipeline: the integrity verdict from what every earlier stage handed on.

The parsed, strictly judged run (`swe_rl.grading.logs.grade` with ``strict``) is the starting point;
then: a patch of which nothing reached the test run is unresolved (not no_patch); a voiding record
(a capability of the added code, a tripped canary, a flagged runner hook under ``flag_voids``) makes it
unresolved; every record lands in the `TamperReport`, and the official verdict sits beside it.
"""

from __future__ import annotations

from swe_rl.grading.canaries.plan import CanaryCheck
from swe_rl.grading.integrity import IntegrityConfig, OfficialVerdict, TamperRecord, TamperReport
from swe_rl.grading.result import GradeResult, GradeStatus
from swe_rl.grading.scans.capabilities import CapabilityReport

__all__ = ["capability_records", "canary_records", "integrity_verdict", "official_from"]


def capability_records(report: CapabilityReport) -> list[TamperRecord]:
    """One record per capability finding that is not ignored (void -> ``voided``, flag -> ``noted``)."""
    return [
        TamperRecord(
            path=f.path,
            rule="capability",
            action="voided" if f.action == "void" else "noted",
            reason=f"{f.capability} (line {f.line}): {f.detail}",
        )
        for f in report.findings
        if f.action != "ignore"
    ]


def canary_records(check: CanaryCheck) -> list[TamperRecord]:
    """A tripped canary: the run's results were forged; one voiding record per reason."""
    if not check.tripped:
        return []
    reasons = check.reasons or ["a canary did not come out as planted"]
    return [TamperRecord(path="", rule="canary", action="voided", reason=r) for r in reasons]


def official_from(result: GradeResult, source: str) -> OfficialVerdict:
    return OfficialVerdict(
        status=result.status.value, resolved=result.resolved, message=result.message, source=source
    )


def _unresolved(result: GradeResult, message: str) -> GradeResult:
    return result.model_copy(update={"status": GradeStatus.UNRESOLVED, "resolved": False, "message": message})


def integrity_verdict(
    result: GradeResult,
    report: TamperReport,
    official: OfficialVerdict,
    config: IntegrityConfig,
    *,
    patch_given: bool,
) -> GradeResult:
    """The strict grade `result` of what ran, voided where a record says so, with `report` and `official`."""
    if result.status is GradeStatus.NO_PATCH and patch_given:  # all of it was tampering: nothing was "fixed"
        result = _unresolved(
            result, "nothing of the patch reached the test run (all of it was test tampering)"
        )
    voiding = [
        r for r in report.records if r.action == "voided" or (r.action == "flagged" and config.flag_voids)
    ]
    if result.resolved and voiding:
        result = _unresolved(result, f"{result.message}; voided: {voiding[0].rule}: {voiding[0].reason}")
    if report.tampered:
        result = result.model_copy(update={"message": f"{result.message}; integrity: {report.summary()}"})
    return result.model_copy(update={"tamper": report, "official": official})
