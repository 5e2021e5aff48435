"""After the test run: what the grading container holds read back, and judged.

The run's bundle (the run-writes listing and the probes' reports, printed into its log or left in one
file: `scans.run_writes`) is unpacked once; the files the run wrote are read with the version each
started from; the probes' reports are checked; the modules the run imported from files no scan read are
judged (`runner.guard`). `pipeline` calls these in the order its stages run.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable

from swe_rl.fleet.client import EvalResult, Lease
from swe_rl.fleet.errors import BadRequest, FileNotFound
from swe_rl.grading.canaries.plan import CanaryPlan
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.integrity import TamperRecord, patch_paths
from swe_rl.grading.runner.guard import imported_records
from swe_rl.grading.runner.machinery import machinery_records
from swe_rl.grading.runner.probe import ProbePlan, ProbeReport, read_probe_report
from swe_rl.grading.runner.probe_languages import LanguageProbePlan, LanguageProbeReport, read_language_probe
from swe_rl.grading.scans.run_writes import MAX_FILES as MAX_WRITTEN
from swe_rl.grading.scans.run_writes import (
    WritesPlan,
    bundle_from_log,
    read_listing,
    unpack_bundle,
    written_records,
    written_sources_wanted,
)
from swe_rl.grading.scans.tree import TreeVerdict
from swe_rl.tasks import TaskInstance

__all__ = [
    "Read",
    "after_run_reader",
    "judge_imports",
    "judge_machinery",
    "judge_writes",
    "language_report",
    "printed_bundle",
    "probe_report",
]

READS_AT_ONCE = 8
"""Container calls in flight at once reading back what the run wrote (up to `MAX_WRITTEN` files)."""


Read = Callable[[str], Awaitable["str | None"]]
"""A file of the grading container after the run, as text (None: not there)."""


async def after_run_reader(lease: Lease, writes: WritesPlan, printed: str | None = None) -> Read:
    """What reads the files the grader needs after the run: the run's bundle (the listing and the probes'
    reports copied into one file, `run_writes.plan_writes`) as the run printed it into its log
    (`printed`), else read in one call; a file the bundle does not hold (no bundle: the script stopped
    before it, or it is too large to read) is read on its own."""
    held: dict[str, str | None] = {}
    if printed is not None:
        held = unpack_bundle(printed, writes)
    elif writes.bundle:
        try:
            held = unpack_bundle(
                (await lease.read_file(writes.bundle)).decode("utf-8", "surrogateescape"), writes
            )
        except (FileNotFound, BadRequest):
            held = {}

    async def read(path: str) -> str | None:
        if path in held:
            return held[path]
        try:
            return (await lease.read_file(path)).decode("utf-8", "surrogateescape")
        except FileNotFound:
            return None

    return read


def printed_bundle(run: EvalResult, writes: WritesPlan) -> str | None:
    """The bundle the run printed, taken out of its log (the grader's lines, not the run's output). None
    when the fleet cut the log: its middle is gone, so a begin line the run's own output printed before
    the cut could pair with the grader's end line; the bundle file is read instead."""
    if run.truncated:
        return None
    printed, log = bundle_from_log(run.test_log or "", writes)
    if printed is not None:
        run.test_log = log
    return printed


async def probe_report(read: Read, plan: ProbePlan) -> ProbeReport:
    """The plugin's report, checked (no file: an unsigned, empty report; bytes not UTF-8: not its own)."""
    text = await read(plan.report_path)
    return read_probe_report(
        None if text is None else text.encode(errors="surrogateescape").decode(errors="replace"), plan
    )


async def language_report(read: Read, plan: LanguageProbePlan, path: str, log: str) -> LanguageProbeReport:
    """The toolchain's answers in `path`, checked against the hash the exec printed in `log`."""
    return read_language_probe(log, await read(path), plan)


async def judge_writes(
    lease: Lease,
    read: Read,
    instance: TaskInstance,
    plan: WritesPlan,
    run: EvalResult,
    tree: TreeVerdict,
    grader: set[str],
    config: GraderConfig,
) -> list[TamperRecord]:
    """The files the run wrote, read back with the version each started from, and judged."""
    written = read_listing(run.test_log or "", await read(plan.listing), plan)
    if written.error:
        return [TamperRecord(path="", rule="run_written_file", action="noted", reason=written.error)]
    wanted = written_sources_wanted(written, instance.workdir, grader)
    patched = {s.path: s.after for s in tree.sources}
    root = instance.workdir.rstrip("/") + "/"

    calls = asyncio.Semaphore(READS_AT_ONCE)

    async def versions(path: str) -> tuple[bytes | None, bytes | None]:
        async with calls:
            return await _versions(path)

    async def _versions(path: str) -> tuple[bytes | None, bytes | None]:
        try:
            after: bytes | None = await lease.read_file(path)
        except FileNotFound:
            after = None
        rel = path[len(root) :] if path.startswith(root) else ""
        if rel and patched.get(rel) is not None:
            return (patched[rel] or "").encode(), after
        if rel:
            shown = await lease.exec(f"git show HEAD:{shlex.quote(rel)}", timeout=60, separate_stderr=True)
            return (shown.output.encode() if shown.returncode == 0 else None), after
        return None, after

    files = dict(zip(wanted, await asyncio.gather(*map(versions, wanted)), strict=True))
    unread = len([p for p in written.paths if p not in wanted]) if len(wanted) >= MAX_WRITTEN else 0
    return written_records(instance.workdir, files, config.integrity.capabilities, unread)


async def judge_machinery(
    read: Read, instance: TaskInstance, plan: LanguageProbePlan, canaries: CanaryPlan, tree: TreeVerdict
) -> list[TamperRecord]:
    """Go, JavaScript, Rust: the report the grader's code inside the test run wrote, judged."""
    text = await read(plan.guard_path)
    expected = plan.language != "go" or bool(canaries.canary_file)  # Go's check lives in the canary file
    changed = set(patch_paths(tree.patch))
    return machinery_records(plan.language, text, instance.workdir, changed, expected)


def judge_imports(
    instance: TaskInstance, patched: ProbeReport, tree: TreeVerdict, config: GraderConfig
) -> list[TamperRecord]:
    """The modules the run imported from files no scan read (`runner_guard`): voided outright, or their
    source as the interpreter read it scanned like a patch (against the patched tree's version)."""
    if patched.error:
        return []
    records, sources = imported_records(instance.workdir, patched.run)
    root = instance.workdir.rstrip("/") + "/"
    before = {s.path: s.after for s in tree.sources}
    files: dict[str, tuple[bytes | None, bytes | None]] = {}
    for path, text in sources.items():
        old = before.get(path[len(root) :]) if path.startswith(root) else None
        files[path] = (old.encode() if old is not None else None, text)
    scanned = written_records(instance.workdir, files, config.integrity.capabilities)
    for record in scanned:
        record.rule = "run_imported_module"
        record.reason = record.reason.replace("written by the test run", "imported by the test run", 1)
    return [*records, *scanned]
