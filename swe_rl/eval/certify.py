"""Certify SWE task instances before they train: gold resolves every time, the empty patch never does.

For each instance: grade the gold patch K times (default 3) and the empty patch once (its tests
really run), each in a fresh container; record every test's status per run, the flaky tests
(status differing across the gold runs), the image id/digest, durations; append one row to
the ledger (JSONL, `swe_rl.grading.certification.LedgerEntry`). Then print the certified fraction and
the flake rate.

    python eval/certify.py run --data data/fixtures/instances.jsonl --ledger output/ledger.jsonl \
        --local-fleet --runs 3 --max-concurrent 4
    python eval/certify.py summary --ledger output/ledger.jsonl
    python eval/certify.py filter --ledger output/ledger.jsonl --data rows.jsonl --output certified.jsonl

Resume is on by default (instances with a ledger row are skipped, except rows that failed on
the fleet); ``--no-resume`` certifies everything again (the newest row of an instance counts).
Use the ledger with ``swe_require_certified`` (plugin) and ``--certified-only`` (eval_swe.py).
Rows are read as eval_swe.py reads them (`run_data.py`: public 4.x-schema rows converted first).
Ctrl-C (or SIGTERM) stops cleanly: the gradings in flight are cancelled and their containers released,
nothing half-written; the summary covers what finished. Exit codes: 0; 2 when 4.x rows cannot be
converted (the message gives the command that makes it possible); 3 when none of the instances given
was certified; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from swe_rl.eval.clean_stop import (
    EXIT_INTERRUPTED,
    CleanStop,
    command_line,
    resume_line,
    sigterm_as_interrupt,
)
from swe_rl.grading.certification import LedgerEntry, read_ledger
from swe_rl.grading.clean_store import STORE_ENV, beside_ledger

log = logging.getLogger("certify")
EXIT_NOTHING_CERTIFIED = 3
"""Exit code when none of the instances given was certified (a dead fleet, rows that cannot be graded)."""
MISSING = "MISSING"
"""Status of a test absent from a run's log."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="certify instances (append to the ledger)")
    run.add_argument("--data", required=True, help="instances (any format eval_swe.py reads)")
    run.add_argument("--split", default="test")
    run.add_argument("--ledger", required=True, type=Path, help="ledger JSONL (appended to)")
    run.add_argument("--runs", type=int, default=3, help="gold runs per instance (K)")
    run.add_argument("--max-concurrent", type=int, default=4, help="gradings at once")
    run.add_argument("--max-instances", type=int, default=None)
    run.add_argument("--instance-ids", default=None, help="comma-separated ids, or @file")
    run.add_argument("--image-template", default=None)
    run.add_argument(
        "--network",
        default=None,
        help="grading network: none, default or a name in SWE_EXEC_NETWORKS (default: the row's)",
    )
    run.add_argument("--eval-timeout", type=float, default=1800.0)
    run.add_argument(
        "--clean-store",
        default=None,
        help="directory keeping each task's clean-tree answers for later gradings (default: $SWE_CLEAN_STORE, "
        "else <ledger>.clean-trees, where swe_require_certified finds it; 'none': not kept)",
    )
    run.add_argument("--no-resume", action="store_true")
    run.add_argument("--local-fleet", action="store_true", help="start exec + pool servers on loopback")
    run.add_argument("--no-progress", action="store_true")
    run.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "WARNING"))
    summ = sub.add_parser("summary", help="certified fraction and flake rate of a ledger")
    summ.add_argument("--ledger", required=True, type=Path)
    filt = sub.add_parser("filter", help="keep the rows of a JSONL data file whose instance is certified")
    filt.add_argument("--ledger", required=True, type=Path)
    filt.add_argument(
        "--data", required=True, type=Path, help="JSONL rows (SWE-bench, fixture or slime rows)"
    )
    filt.add_argument("--output", required=True, type=Path)
    args = p.parse_args(argv)
    if args.command == "run" and args.runs < 1:
        p.error("--runs must be at least 1")
    return args


# ---------------------------------------------------------------------------- one instance


def image_identity(image: str) -> tuple[str | None, list[str]]:
    """(image id, registry digests) as the local Docker daemon knows them; (None, []) when it cannot say."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            img = client.images.get(image)
            return img.id, list(img.attrs.get("RepoDigests") or [])
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - no daemon here, or not this image: not a certification failure
        return None, []


def certify_entry(
    instance: Any, gold: list[Any], empty: Any, image_id: str | None, digests: list[str]
) -> LedgerEntry:
    """The ledger row from K gold grades and the empty-patch grade."""
    statuses = [g.status.value for g in gold]
    ran = [g for g in gold if g.status.value != "env_error"]  # a run lost on the fleet says nothing of a test
    names = sorted({t for g in ran for t in g.tests_status})
    tests = {t: [g.tests_status.get(t, MISSING) for g in ran] for t in names}
    flaky = sorted(t for t, runs in tests.items() if len(set(runs)) > 1)
    env_errors = [g.message for g in [*gold, empty] if g.status.value == "env_error"]
    empty_ran = bool(empty.tests_status) or bool(empty.test_log)
    if not empty_ran and not env_errors:  # the empty patch's tests only fail to run when the fleet failed
        env_errors = [f"the empty patch's tests did not run: {empty.message}"]
    empty_resolves = empty_ran and not empty.fail_to_pass.failure and not empty.pass_to_pass.failure
    reason = ""
    if env_errors:
        reason = f"env_error: {env_errors[0]}"
    elif any(s != "resolved" for s in statuses):
        bad = [s for s in statuses if s != "resolved"]
        reason = f"gold not resolved in {len(bad)}/{len(statuses)} runs ({', '.join(sorted(set(bad)))})"
    elif empty_resolves:
        reason = "the empty patch already meets FAIL_TO_PASS and PASS_TO_PASS"
    return LedgerEntry(
        instance_id=instance.instance_id, certified=not reason, reason=reason, env_error=bool(env_errors),
        image=instance.image, image_id=image_id, repo_digests=digests, network=gold[0].network,
        gold_runs=len(gold), gold_statuses=statuses, gold_apply_strategies=[g.apply_strategy for g in gold],
        empty_status=empty.status.value, empty_would_resolve=empty_resolves, tests=tests,
        empty_tests=dict(empty.tests_status), flaky_tests=flaky,
        gold_seconds=[round(g.eval_seconds or 0.0, 3) for g in gold],
        empty_seconds=round(empty.eval_seconds, 3) if empty.eval_seconds is not None else None,
        certified_at=time.time(),
    )  # fmt: skip


async def certify_instance(grader: Any, instance: Any, runs: int, sem: asyncio.Semaphore) -> LedgerEntry:
    async def graded(patch: str) -> Any:
        async with sem:
            return await grader.grade(instance, patch)

    *gold, empty = await asyncio.gather(*[graded(instance.patch) for _ in range(runs)], graded(""))
    image_id, digests = await asyncio.to_thread(image_identity, instance.image)
    return certify_entry(instance, gold, empty, image_id, digests)


# ---------------------------------------------------------------------------- run / summary / filter


def summarize(ledger_path: Path, instance_ids: list[str] | None = None) -> dict[str, Any]:
    """The figures of a ledger (of ``instance_ids`` only, when given: a run with nothing graded has
    no ledger yet, and its figures are all 0)."""
    if instance_ids is not None and not ledger_path.exists():
        entries: list[LedgerEntry] = []
    else:
        wanted = None if instance_ids is None else set(instance_ids)
        ledger = read_ledger(ledger_path)
        entries = [e for i, e in ledger.entries.items() if wanted is None or i in wanted]
    total = len(entries)
    certified = sum(1 for e in entries if e.certified)
    flaky = sum(1 for e in entries if e.flaky_tests)
    reasons: dict[str, int] = {}
    for e in entries:
        if not e.certified:
            key = e.reason.split(":")[0].split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "instances": total,
        "certified": certified,
        "certified_fraction": round(certified / total, 4) if total else 0.0,
        "with_flaky_tests": flaky,
        "flake_rate": round(flaky / total, 4) if total else 0.0,
        "flaky_tests": sum(len(e.flaky_tests) for e in entries),
        "env_errors": sum(1 for e in entries if e.env_error),
        "not_certified_reasons": reasons,
        "uncertified_ids": sorted(e.instance_id for e in entries if not e.certified),
    }


def load_given(args: argparse.Namespace) -> list[Any]:
    """The instances named by --data/--instance-ids/--max-instances, read as swe-eval reads them
    (`run_data.load_run_instances`: 4.x-schema rows converted; `ConversionUnavailable` before any run)."""
    from swe_rl.eval.eval_args import instance_ids
    from swe_rl.eval.run_data import load_run_instances

    return load_run_instances(
        args.data,
        split=args.split,
        image_template=args.image_template,
        instance_ids=instance_ids(args.instance_ids),
        limit=args.max_instances,
    ).instances


async def run(
    args: argparse.Namespace,
    pool_env: dict[str, str] | None = None,
    instances: list[Any] | None = None,
    stop: CleanStop | None = None,
) -> dict[str, Any]:
    """Certify ``instances`` (default: `load_given`); a SIGINT/SIGTERM cancels the gradings in flight
    (their containers released, no ledger row: a resume certifies them) and the summary says so."""
    from swe_rl.agent.fleet_session import FleetConfig, open_fleet
    from swe_rl.eval.eval_swe import _end_torn_line
    from swe_rl.eval.progress import StatusBar
    from swe_rl.grading.config import GraderConfig

    if instances is None:
        instances = load_given(args)
    args.ledger.parent.mkdir(parents=True, exist_ok=True)
    _end_torn_line(args.ledger)  # an interrupted run may have left half a line
    done: set[str] = set()
    if not args.no_resume and args.ledger.exists():
        done = {i for i, e in read_ledger(args.ledger).entries.items() if not e.env_error}
    todo = [i for i in instances if i.instance_id not in done and i.patch.strip()]
    skipped_no_gold = [i.instance_id for i in instances if not i.patch.strip()]
    if skipped_no_gold:
        print(
            f"warning: {len(skipped_no_gold)} instance(s) have no gold patch and cannot be certified",
            file=sys.stderr,
        )
    if done:
        print(f"resume: {len(instances) - len(todo)} of {len(instances)} instances already in the ledger")
    fleet_config = FleetConfig.for_pool(
        pool_env,
        grading=GraderConfig(
            eval_timeout=args.eval_timeout, network=args.network, clean_store=clean_store_of(args)
        ),
    )
    sem = asyncio.Semaphore(max(1, args.max_concurrent))
    progress = StatusBar(len(todo), disabled=args.no_progress)
    stop = stop or CleanStop()
    finished = 0

    async def one(instance: Any, grader: Any) -> None:
        nonlocal finished
        try:
            entry = await certify_instance(grader, instance, args.runs, sem)
        except Exception as exc:
            log.exception("certifying %s failed", instance.instance_id)
            entry = LedgerEntry(
                instance_id=instance.instance_id,
                certified=False,
                env_error=True,
                image=instance.image,
                reason=f"env_error: {type(exc).__name__}: {exc}",
                certified_at=time.time(),
            )
        with args.ledger.open("a") as fh:  # one whole line per instance: resume-safe
            fh.write(entry.model_dump_json() + "\n")
        finished += 1
        progress.update("certified" if entry.certified else "env_error" if entry.env_error else "rejected")

    if todo:  # nothing to grade: no fleet needed
        async with open_fleet(fleet_config) as fleet:
            stop.install()
            try:
                await stop.run_all(one(i, fleet.grader) for i in todo)
            finally:
                stop.uninstall()
    progress.close()
    summary = summarize(args.ledger, [i.instance_id for i in instances])
    summary["given"] = len(instances)
    if stop.signal_name:
        summary["interrupted"] = stop.signal_name
        summary["finished_now"], summary["todo"] = finished, len(todo)
    return summary


def clean_store_of(args: argparse.Namespace) -> str:
    """The clean-tree store this run writes ('' : none): ``--clean-store``, else ``SWE_CLEAN_STORE``, else
    beside the ledger (where the plugin's ``swe_require_certified`` looks for it)."""
    given = args.clean_store
    if given is None:
        return os.environ.get(STORE_ENV) or beside_ledger(args.ledger)
    return "" if given.strip().lower() in ("", "none") else given


def certify_exit(summary: dict[str, Any]) -> int:
    """0 when something given was certified; 3 (said on stderr, with the reasons) when nothing was."""
    if summary["certified"]:
        return 0
    given, reasons = summary.get("given", summary["instances"]), summary["not_certified_reasons"]
    why = ", ".join(f"{k}: {v}" for k, v in reasons.items()) or "no instance could be certified"
    print(f"error: certified none of the {given} instance(s) given ({why})", file=sys.stderr)
    return EXIT_NOTHING_CERTIFIED


def filter_rows(ledger_path: Path, data: Path, output: Path) -> tuple[int, int]:
    """Copy the certified rows of a JSONL file verbatim; returns (kept, total)."""
    from swe_rl.tasks import RowInvalid, instance_from_row

    ledger = read_ledger(ledger_path)
    kept = total = 0
    with data.open() as src, output.open("w") as dst:
        for line in src:
            if not line.strip():
                continue
            total += 1
            try:
                iid = instance_from_row(json.loads(line)).instance_id
            except (RowInvalid, json.JSONDecodeError):
                continue
            if ledger.is_certified(iid):
                dst.write(line if line.endswith("\n") else line + "\n")
                kept += 1
    return kept, total


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "summary":
        print(json.dumps(summarize(args.ledger), indent=1))
        return 0
    if args.command == "filter":
        kept, total = filter_rows(args.ledger, args.data, args.output)
        print(f"kept {kept} of {total} rows (certified) in {args.output}")
        return 0
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from swe_rl.eval.grading_hooks import local_fleet_networks, run_graders
    from swe_rl.tasks.swebench4 import ConversionUnavailable

    sigterm_as_interrupt()  # start-up: a SIGTERM still lets the local fleet clean up
    command = command_line("swe_rl.eval.certify", list(sys.argv[1:] if argv is None else argv))
    try:
        instances = load_given(args)  # before any fleet starts: a conversion that cannot run says so
        summary = run_graders(
            lambda *env: run(args, env[0] if env else None, instances),
            local_fleet=args.local_fleet,
            max_concurrent=args.max_concurrent,
            networks=local_fleet_networks(args, args.network) if args.local_fleet else [],
        )
    except ConversionUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the run's own handler was in place, or a repeated signal
        print(f"\ninterrupted; run the same command again to resume: {command}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(json.dumps(summary, indent=1))
    print(f"ledger: {args.ledger}")
    if summary.get("interrupted"):
        line = resume_line(summary["interrupted"], summary["finished_now"], summary["todo"], command)
        print(line, file=sys.stderr)
        return EXIT_INTERRUPTED
    return certify_exit(summary)


if __name__ == "__main__":
    raise SystemExit(main())
