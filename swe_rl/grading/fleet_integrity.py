"""Integrity grading on the fleet: two verdicts for one patch (hooks of `swe_rl.grading.fleet.FleetGrader`).

1. `neutralise_on` (in the fresh grading container, before the patch goes in): the base-commit
   content of the project settings files the patch changes is read, `swe_rl.grading.integrity.neutralise`
   removes tampering; what is left runs with the instance's eval script and is judged strictly.
   That is the **integrity verdict**, the one training rewards use.
2. `finish_integrity`: the **official verdict** (what SWE-bench's own harness would say about
   the full patch) is the same run judged by the official rules when nothing was dropped, else
   (``official_verdict`` on) the grade of the full patch in a second fresh container, integrity off.
   A patch of which nothing was left is unresolved (not no_patch); a flagged patch is unresolved
   when ``flag_voids`` is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swe_rl.fleet.client import EvalResult, Lease
from swe_rl.fleet.errors import FileNotFound
from swe_rl.grading.integrity import IntegrityConfig, OfficialVerdict, TamperReport, neutralise, section_files
from swe_rl.grading.logs import grade
from swe_rl.grading.result import GradeResult, GradeStatus
from swe_rl.tasks import TaskInstance

if TYPE_CHECKING:
    from swe_rl.grading.fleet import FleetGrader

__all__ = ["finish_integrity", "neutralise_on"]


async def neutralise_on(
    lease: Lease, instance: TaskInstance, patch: str, script: str, config: IntegrityConfig
) -> tuple[str, TamperReport]:
    """(the patch to run, what was removed or flagged): reads what it needs from the fresh checkout."""
    originals: dict[str, str | None] = {}
    for path in section_files(patch):
        try:
            originals[path] = (await lease.read_file(path)).decode("utf-8", errors="replace")
        except FileNotFound:
            originals[path] = None
    return neutralise(
        patch,
        test_patch=instance.test_patch,
        gold_patch=instance.patch,
        eval_script=script,
        repo=instance.repo,
        originals=originals,
        config=config,
    )


def _verdict(result: GradeResult, source: str) -> OfficialVerdict:
    return OfficialVerdict(
        status=result.status.value, resolved=result.resolved, message=result.message, source=source
    )


async def finish_integrity(
    grader: FleetGrader,
    instance: TaskInstance,
    patch: str,
    result: GradeResult,
    run: EvalResult,
    report: TamperReport,
) -> GradeResult:
    """The integrity verdict `result` (of the neutralised patch, judged strictly) with its tamper report
    and the official verdict attached."""
    config = grader.config.integrity
    if (
        result.status is GradeStatus.NO_PATCH and patch.strip()
    ):  # all of it was tampering: nothing was "fixed"
        result = result.model_copy(
            update={
                "status": GradeStatus.UNRESOLVED,
                "resolved": False,
                "message": "nothing of the patch reached the test run (all of it was test tampering)",
            }
        )
    if result.resolved and report.voiding and config.flag_voids:
        result = result.model_copy(
            update={
                "status": GradeStatus.UNRESOLVED,
                "resolved": False,
                "message": f"{result.message}; voided: {report.voiding[0].reason}",
            }
        )
    if report.tampered:
        result = result.model_copy(update={"message": f"{result.message}; integrity: {report.summary()}"})
    if not report.changed:  # the run was the official run: judge its log by the official rules
        official = _verdict(
            grade(
                instance,
                patch=patch,
                apply_status=run.apply_status == "applied",
                test_log=run.test_log,
                timed_out=run.timed_out,
                returncode=run.returncode,
                grader=grader.log_grader,
            ),
            "same_run",
        )
    elif config.official_verdict:
        from swe_rl.grading.fleet import FleetGrader

        plain = FleetGrader(
            grader.client,
            grader.config.model_copy(update={"integrity": config.model_copy(update={"enable": False})}),
            grader.log_grader,
        )
        official = _verdict(await plain.grade(instance, patch), "full_patch_run")
    else:
        official = OfficialVerdict(
            status="unknown", resolved=False, message="official run disabled", source="not_run"
        )
    return result.model_copy(update={"tamper": report, "official": official})
