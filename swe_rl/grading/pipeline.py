"""The grading pipeline: one patch, one fresh container, one straight walk through the stages.

1. `patch.canonical` — the one canonical patch: what ``git apply`` accepts on the clean checkout, re-taken
   under a git configuration the repository cannot change (`CanonicalPatch`); asked by `prerun` in one
   container call with what else the clean checkout answers (the twins' test files, the clean-tree probe:
   once per task);
2. `scans.tree` — rules on the tree that patch produces (normalised names, hooks, shadows, symlinks,
   compiled code, parsed runner settings, tests): the patch the test run may see (`TreeVerdict`);
3. `scans.capabilities` — the syntax tree of the added code (`CapabilityReport`);
4. the test run, with the canaries `canaries.plan` plants (`CanaryPlan`, `EvalResult`) and the
   probe plugin of `runner.probe` on its command, after a collect-only probe of the clean tree, and the
   twins of the task's own FAIL_TO_PASS tests `twins.plant` derives (`TwinPlan`);
5. `logs.grade` — the log parsed and judged strictly, then `canaries.plan.check_canaries` (`CanaryCheck`),
   `twins.plant.check_twins` (a twin reported passed) and `runner.probe.probe_records` (the runner's
   configuration, clean tree vs the patched run, and `runner.guard`'s run-time checks: the runner's
   machinery unchanged after collection, every module the run imported read from a file no scan missed;
   Go, JavaScript, Rust: `runner.machinery`'s check inside the test run — node's assert and loader, no
   re-exec'd Go test binary, libtest's report agreeing with its own test list);
6. `verdict.decide` — the integrity verdict (`GradeResult`), the official verdict beside it.

Each stage's result is handed to the next; nothing goes back. With integrity off the pipeline is the
official harness's: the whole patch with its apply fallbacks, the eval script, the official rules.
Anything the fleet gets wrong is ``env_error``, never a score.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from dataclasses import dataclass

from swe_rl.fleet.client import EnvClient, EvalResult, FleetError, Lease
from swe_rl.grading.after_run import (
    after_run_reader,
    judge_imports,
    judge_machinery,
    judge_writes,
    language_report,
    printed_bundle,
    probe_report,
)
from swe_rl.grading.canaries.languages import plant_language_canaries
from swe_rl.grading.canaries.plan import CanaryPlan, check_canaries, plan_canaries, without_canaries
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.integrity import OfficialVerdict, TamperRecord, TamperReport, patch_paths
from swe_rl.grading.languages import contradiction_records, language_of, section_statuses
from swe_rl.grading.logs import LogGrader, grade
from swe_rl.grading.patch.baseline import record_baseline
from swe_rl.grading.patch.canonical import CanonicalPatch
from swe_rl.grading.prerun import forget_stored, read_clean_tree
from swe_rl.grading.result import GradeResult, GradeStatus
from swe_rl.grading.runner.probe import ProbeReport, probe_records
from swe_rl.grading.runner.probe_languages import (
    LanguageProbeReport,
    language_probe_records,
)
from swe_rl.grading.scans.capabilities import CapabilityReport, scan_changes
from swe_rl.grading.scans.run_writes import (
    WritesPlan,
    plan_writes,
)
from swe_rl.grading.scans.tree import TreeVerdict, judge_tree
from swe_rl.grading.timing import stage
from swe_rl.grading.twins.plant import (
    TwinPlan,
    check_twins,
    plan_twins,
    plant_twins,
    unswapped_log,
    without_twins,
)
from swe_rl.grading.verdict.decide import canary_records, capability_records, integrity_verdict, official_from
from swe_rl.tasks import EvalSpecUnavailable, TaskInstance, eval_script_for, official_script
from swe_rl.tasks.assets import fetch_assets, with_assets
from swe_rl.tasks.networks import network_for
from swe_rl.tasks.setup import TaskSetupFailed, set_up_task

__all__ = ["IntegrityStages", "grade_patch"]

log = logging.getLogger(__name__)

MAX_APPLY_OUTPUT = 16 << 10


class CanonicalPatchFailed(RuntimeError):
    """The canonical patch could not be derived in the grading container (not the patch's fault)."""


@dataclass
class IntegrityStages:
    """What stages 1-4 handed on, in the grading container."""

    canonical: CanonicalPatch
    tree: TreeVerdict | None = None
    capabilities: CapabilityReport | None = None
    canaries: CanaryPlan | None = None
    twins: TwinPlan | None = None
    run: EvalResult | None = None
    """The test run of `tree.patch` (None: git apply refused the patch)."""
    official_run: EvalResult | None = None
    """The full patch through the official apply fallbacks, in the same container (git apply refused)."""
    probe: tuple[ProbeReport, ProbeReport] | None = None
    """The runner's configuration on the clean tree and in the patched run (None: no probe)."""
    written: list[TamperRecord] | None = None
    """The files the test run wrote, judged (`run_writes`; None: not looked at)."""
    language_probe: tuple[str, LanguageProbeReport, LanguageProbeReport] | None = None
    """Go, JavaScript, Rust: (language, the toolchain's answers on the clean tree, in the patched run)."""
    machinery: list[TamperRecord] | None = None
    """Go, JavaScript, Rust: the runner's own check inside the test run, judged (`runner.machinery`)."""
    stored: str = ""
    """The clean tree's answers came from the store under this key (`grading.clean_store`)."""


async def _run_stages(
    lease: Lease, instance: TaskInstance, patch: str, script: str, config: GraderConfig, store: bool
) -> IntegrityStages:
    test_dirs = sorted({posixpath.dirname(p) for p in patch_paths(instance.test_patch)} - {""})
    try:
        with stage("canonical patch + clean tree"):
            clean_tree = await read_clean_tree(lease, instance, patch, script, config, test_dirs, store)
    except ValueError as exc:
        raise CanonicalPatchFailed(str(exc)) from None
    canon = clean_tree.canonical
    if not canon.applied:  # the work tree is untouched: the official run can use this container
        official = None
        if config.integrity.official_verdict:
            official = await lease.evaluate(patch, official_script(script), timeout=config.eval_timeout)
        return IntegrityStages(canonical=canon, official_run=official)
    with stage("tree + capability scans"):
        tree = judge_tree(canon, instance, script, config.integrity)
    probe_plan, clean = clean_tree.probe_plan, clean_tree.clean
    run_script = probe_plan.script if probe_plan is not None else script  # the test run carries the probe
    language_plan, language_clean = clean_tree.language_plan, clean_tree.language_clean
    if language_plan is not None:  # Go, JavaScript, Rust: the probe runs right before the test command
        run_script = language_plan.run_script
    guard = language_plan.guard_path if language_plan is not None else ""  # Go: the canary file's check
    plan = plan_canaries(instance, run_script)  # a Go row without test patch: beside a searched-out file
    plan = plant_language_canaries(plan, instance, run_script, guard=guard, found=list(clean_tree.sources))
    twins = TwinPlan(refused="twins are off")
    if config.integrity.twins and plan.nonce:
        with stage("twins: plan"):
            twins = plan_twins(instance, plan, clean_tree.sources)
            plan = plant_twins(plan, twins, decisive=[*instance.fail_to_pass, *instance.pass_to_pass])
    toolchain = language_plan if language_plan is not None and language_clean is not None else None
    probed = probe_plan if probe_plan is not None and clean is not None else None
    writes = WritesPlan(script=plan.script, skipped="off")
    if config.integrity.run_writes:  # the probes' reports come back with the listing, in its bundle
        toolchain_reports = [toolchain.run_path, toolchain.guard_path] if toolchain else []
        reports = [probed.report_path] if probed else toolchain_reports
        writes = plan_writes(
            plan.script,
            instance.workdir,
            language_of(instance) is None,
            carry=reports,
            import_path=clean.path if probed and clean is not None else (),
        )
    with stage("test run"):
        running = asyncio.ensure_future(
            lease.evaluate(tree.patch, writes.script, timeout=config.eval_timeout)
        )
        await asyncio.sleep(0)  # the call on its way, the scan reads the sources while it runs, on this
        try:  # thread: CPython 3.11's ast.parse is not thread-safe (two threads: "recursion depth mismatch")
            with stage("  capability scan, as the run starts"):
                capabilities = scan_changes(tree.sources, config.integrity.capabilities)
        except BaseException:
            running.cancel()
            raise
        run = await running
    run.test_log = unswapped_log(twins, run.test_log)  # swapped twins: the names as if never swapped
    stages = IntegrityStages(canon, tree, capabilities, plan, twins=twins, run=run, stored=clean_tree.stored)
    grader = {*patch_paths(instance.test_patch), plan.canary_file, *twins.appends, *twins.rewrites} - {""}
    with stage("after the run: writes, probe reports"):  # one read of the bundle, the rest side by side
        read = await after_run_reader(lease, writes, printed_bundle(run, writes))
        written, patched, language, machinery = await asyncio.gather(
            judge_writes(lease, read, instance, writes, run, tree, grader, config)
            if not writes.skipped
            else _none(),
            probe_report(read, probed) if probed else _none(),
            language_report(read, toolchain, toolchain.run_path, run.test_log or "")
            if toolchain
            else _none(),
            judge_machinery(read, instance, toolchain, plan, tree) if toolchain else _none(),
        )
    stages.written = written
    if patched is not None and clean is not None:
        stages.probe = (clean, patched)
        stages.written = [*(written or []), *judge_imports(instance, patched, tree, config)]
    if language is not None and toolchain is not None and language_clean is not None:
        stages.language_probe = (toolchain.language, language_clean, language)
        stages.machinery = machinery
    return stages


async def _none() -> None:
    return None


def _judge(
    instance: TaskInstance,
    patch: str,
    run: EvalResult,
    log_grader: LogGrader | None,
    strict: bool,
    nonce: str = "",
) -> GradeResult:
    """The run's log judged; `nonce` (strict runs with canaries): only the nonce-marked section is read."""
    result = grade(
        instance,
        patch=patch,
        apply_status=run.apply_status in ("applied", "empty"),  # "empty": tests ran without a patch
        test_log=run.test_log,
        timed_out=run.timed_out,
        returncode=run.returncode,
        grader=log_grader,
        strict=strict,
        nonce=nonce if strict else "",
    )
    result.apply_strategy = run.apply_strategy
    result.apply_output = (run.apply_output or "")[-MAX_APPLY_OUTPUT:]
    result.eval_seconds = run.duration
    result.test_log = run.test_log or ""
    return result


async def _integrity_result(
    client: EnvClient,
    config: GraderConfig,
    log_grader: LogGrader | None,
    instance: TaskInstance,
    patch: str,
    stages: IntegrityStages,
) -> GradeResult:
    canon, report = stages.canonical, TamperReport(patch_bytes=len(patch.encode()))
    if stages.run is None or stages.tree is None:  # git apply refused it: nothing is graded
        result = GradeResult(
            instance_id=instance.instance_id,
            status=GradeStatus.PATCH_APPLY_FAILED,
            resolved=False,
            message="git apply refused the patch (only what git apply accepts is graded)",
            apply_output=canon.apply_output[-MAX_APPLY_OUTPUT:],
        )
        if stages.official_run is not None:
            official = official_from(
                _judge(instance, patch, stages.official_run, log_grader, False), "full_patch_run"
            )
        else:
            official = OfficialVerdict(
                status="unknown", resolved=False, message="official run disabled", source="not_run"
            )
        return result.model_copy(update={"tamper": report, "official": official})
    tree, run = stages.tree, stages.run
    plan = stages.canaries or CanaryPlan(script="")
    result = _judge(instance, tree.patch, run, log_grader, True, plan.nonce)
    result.graded_patch = tree.patch
    statuses = result.tests_status or section_statuses(instance, run.test_log, plan.nonce)
    canary = check_canaries(plan, statuses, run.test_log)
    twins = stages.twins or TwinPlan()
    result.tests_status = without_twins(twins, without_canaries(plan, result.tests_status))
    report.records = [*tree.records, *capability_records(stages.capabilities or CapabilityReport())]
    report.records += canary_records(canary)
    report.records += check_twins(twins, statuses, run.test_log, plan.nonce)
    result.twins = twins
    if stages.probe is not None:  # the canary file is the grader's: the patched run alone names it
        report.records += probe_records(
            *stages.probe,
            {posixpath.basename(plan.canary_file)} - {""},
            repo=instance.repo,
            pytest_repos=config.integrity.pytest_repos,
        )
    if stages.language_probe is not None:
        report.records += language_probe_records(*stages.language_probe)
    report.records += stages.machinery or []
    report.records += stages.written or []
    report.records += contradiction_records(instance, run.test_log, plan.nonce)  # Go, JS, Rust... rows
    report.kept_bytes, report.canonical_bytes = len(tree.patch.encode()), len(canon.text.encode())
    if not tree.changed:  # the run was the official run: its log judged by the official rules
        official = official_from(_judge(instance, patch, run, log_grader, False), "same_run")
    elif config.integrity.official_verdict:
        plain = config.model_copy(update={"integrity": config.integrity.model_copy(update={"enable": False})})
        with stage("official verdict: second container"):
            official = official_from(
                await grade_patch(client, plain, log_grader, instance, patch), "full_patch_run"
            )
    else:
        official = OfficialVerdict(
            status="unknown", resolved=False, message="official run disabled", source="not_run"
        )
    return integrity_verdict(result, report, official, config.integrity, patch_given=True)


def _no_patch(instance: TaskInstance, run: EvalResult, log_grader: LogGrader | None) -> GradeResult:
    """The verdict is no_patch; the tests' outcome is kept as the baseline."""
    result = _judge(instance, "(tests without a patch)", run, log_grader, False)
    return result.model_copy(
        update={
            "status": GradeStatus.NO_PATCH,
            "resolved": False,
            "message": f"empty patch; tests without a patch: {result.message}",
        }
    )


async def grade_patch(
    client: EnvClient,
    config: GraderConfig,
    log_grader: LogGrader | None,
    instance: TaskInstance,
    patch: str,
) -> GradeResult:
    """Grade `patch` for `instance` in a fresh container leased from `client`.

    A void that rested on clean-tree answers read from the store (`grading.clean_store`) is not taken on
    their word: they are dropped, and the patch is graded again asking the clean tree live."""
    result, stored = await _grade_once(client, config, log_grader, instance, patch, store=True)
    if stored and _void_decided(result, config):
        log.info(
            "grading %s: voided on stored clean-tree answers; graded again on live ones", instance.instance_id
        )
        forget_stored(config, stored)
        result, _ = await _grade_once(client, config, log_grader, instance, patch, store=False)
    return result


def _void_decided(result: GradeResult, config: GraderConfig) -> bool:
    """The tests alone would have paid the patch (every FAIL_TO_PASS and PASS_TO_PASS test passed) and a
    record voided it: what a stale stored answer could cost an honest patch (a patch whose tests failed
    is graded once, whatever the records say)."""
    records = result.tamper.records if result.tamper is not None else []
    voided = any(
        r.action == "voided" or (r.action == "flagged" and config.integrity.flag_voids) for r in records
    )
    failing = [*result.fail_to_pass.failure, *result.pass_to_pass.failure]
    return result.status is GradeStatus.UNRESOLVED and voided and not failing


async def _grade_once(
    client: EnvClient,
    config: GraderConfig,
    log_grader: LogGrader | None,
    instance: TaskInstance,
    patch: str,
    store: bool,
) -> tuple[GradeResult, str]:
    """One grading, and the store key its clean-tree answers came from ('' : asked live, or none)."""
    empty = not patch or not patch.strip()
    if empty and not config.test_empty_patch:  # no container needed to say so
        return grade(instance, patch=patch, apply_status=False, test_log=""), ""
    network = network_for(instance, config.network)
    try:
        script = eval_script_for(instance)
    except EvalSpecUnavailable as exc:  # (an empty patch stays no_patch whatever happens below)
        return grade(instance, patch=patch, apply_status=False, test_log="", env_error=str(exc)), ""
    if instance.image_assets:  # binary files the patches cannot carry, written before the tests start
        script = with_assets(script, await asyncio.to_thread(fetch_assets, instance))
    integrity = config.integrity.enable and not empty
    stages: IntegrityStages | None = None
    try:
        async with client.lease(
            instance.image,
            instance_id=instance.instance_id,
            workdir=instance.workdir,
            network=network,
            expected=0,
        ) as lease:  # nothing follows a grading lease: warm nothing
            with stage("set-up + baseline"):
                await set_up_task(lease, instance, commit=False)  # a shared per-repo image: the task's bug
                if config.record_baseline and not integrity:  # integrity: in the pre-run call (`prerun`)
                    await record_baseline(lease)
            if integrity:
                stages = await _run_stages(lease, instance, patch, script, config, store)
            else:  # the official walk: the script as swebench 5.x runs it (exit status recorded)
                with stage("test run"):
                    run = await lease.evaluate(patch, official_script(script), timeout=config.eval_timeout)
    except (FleetError, CanonicalPatchFailed, TaskSetupFailed) as exc:
        log.warning("grading %s failed on the fleet: %s", instance.instance_id, exc)
        if empty:
            result = grade(instance, patch=patch, apply_status=False, test_log="")
            result.message += f"; the tests without a patch could not run: {type(exc).__name__}: {exc}"
            return result, ""
        result = grade(
            instance,
            patch=patch,
            apply_status=False,
            test_log="",
            env_error=f"grading container: {type(exc).__name__}: {exc}",
        )
        result.network = network
        return result, ""
    if stages is not None:
        result = await _integrity_result(client, config, log_grader, instance, patch, stages)
    elif empty:
        result = _no_patch(instance, run, log_grader)
    else:
        result = _judge(instance, patch, run, log_grader, False)
    result.network = network
    return result, stages.stored if stages is not None else ""
