"""Grade predictions (``preds.json``: instance_id -> model_patch) with our SWE-bench grader on the fleet.

Made for mini-swe-agent runs (``eval/run_minisweagent.py`` or ``mini-extra swebench``), it reads
any ``preds.json`` in SWE-bench's prediction format (a dict keyed by instance id, or a list of
``{instance_id, model_patch}`` rows; a ``.jsonl`` of such rows works too). Each patch is applied
in a fresh container of its instance's image and the instance's tests decide, exactly as
``eval/eval_swe.py`` grades its own agent; the output is the same (``results.jsonl``,
``summary.json``, ``report.html`` via ``eval/report.py``), so the two paths compare directly
(``eval/compare_runs.py``).

    python eval/grade_predictions.py --preds output/mini/qwen3/preds.json \
        --data ~/swe_verified/verified_eval.jsonl                  # fleet from SWE_POOL_URL
    python eval/grade_predictions.py --preds node*/preds.json --data ... --output-dir merged --local-fleet

Several ``--preds`` (one per node of a sliced run) are graded as one run. When a prediction's
mini-swe-agent trajectory sits next to it (``<run>/<id>/<id>.traj.json``), its exit status, steps
and tokens fill the row; an instance whose container could not even start is ``env_error``
(an infrastructure failure), not ``no_patch``. Resume is on: rows already graded for the same
patch are kept. Ctrl-C (or SIGTERM) stops cleanly as in ``eval/eval_swe.py``: no new grades, the
running ones cancelled (containers released), summary and report for what was graded, exit 130.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from swe_rl.eval.clean_stop import (
    EXIT_INTERRUPTED,
    CleanStop,
    command_line,
    resume_line,
    sigterm_as_interrupt,
)
from swe_rl.eval.predictions import load_predictions, patch_digest, read_trajectory, trajectory_facts
from swe_rl.eval.report import last_rows, summarize, write_report
from swe_rl.eval.run_history import RunHistory

log = logging.getLogger("grade_predictions")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Grade a preds.json with the SWE-bench grader on the fleet")
    p.add_argument(
        "--preds",
        nargs="+",
        required=True,
        type=Path,
        help="preds.json file(s) (or run directories holding one); later files win on duplicates",
    )
    p.add_argument(
        "--data",
        default=None,
        help="the instances the predictions are for (any load_instances input; "
        "default: the data recorded in the run's minisweagent_run.json)",
    )
    p.add_argument("--split", default="test")
    p.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where results.jsonl/summary.json/report.html go (default: the directory of the only --preds)",
    )
    p.add_argument("--image-template", default=None, help="image name template or registry prefix override")
    p.add_argument("--max-concurrent", type=int, default=4, help="patches graded at once")
    p.add_argument("--eval-timeout", type=float, default=1800.0, help="seconds for the test run of one patch")
    p.add_argument("--no-resume", action="store_true", help="grade every prediction again")
    p.add_argument(
        "--grading-network",
        default=None,
        help="network of grading containers: none, default or a name in SWE_EXEC_NETWORKS "
        "(default: the row's)",
    )
    p.add_argument(
        "--local-fleet",
        action="store_true",
        help="start exec + pool servers on loopback for this run (else use SWE_POOL_URL)",
    )
    p.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "WARNING"))
    args = p.parse_args(argv)
    args.preds = [f / "preds.json" if f.is_dir() else f for f in args.preds]
    if args.output_dir is None:
        if len(args.preds) != 1:
            p.error("--output-dir is required with more than one --preds")
        args.output_dir = args.preds[0].parent
    if args.data is None:
        recorded = [
            json.loads(f.read_text()).get("data")
            for f in (pr.parent / "minisweagent_run.json" for pr in args.preds)
            if f.exists()
        ]
        if not recorded or not recorded[0]:
            p.error("--data is required (no minisweagent_run.json next to the predictions says which data)")
        args.data = recorded[0]
    return args


# ---------------------------------------------------------------------------- grading


def write_artifacts(
    run_dir: Path,
    instance: Any,
    patch: str,
    facts: dict[str, Any],
    grade: Any,
    traj: dict[str, Any] | None,
    meta: dict[str, Any],
    grade_seconds: float,
) -> Path:
    """``<id>__<ts>/{traj.json,patch.diff,meta.json}`` as eval_swe.py writes them (traj.json embeds mini's)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    out = run_dir / f"{instance.instance_id}__{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "instance_id": instance.instance_id,
        "status": grade.status.value,
        "resolved": grade.resolved,
        "exit_reason": facts["exit_reason"],
        "harness": "mini-swe-agent",
        "grade": grade.model_dump(mode="json"),
        "minisweagent": traj,
    }
    (out / "traj.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    (out / "patch.diff").write_text(patch)
    (out / "meta.json").write_text(
        json.dumps(
            {
                **meta,
                "instance_id": instance.instance_id,
                "image": instance.image,
                "data_source": instance.data_source,
                "agent_seconds": facts["agent_seconds"],
                "grade_seconds": grade_seconds,
            },
            indent=1,
        )
    )
    return out


def prediction_row(
    instance_id: str, patch: str, facts: dict[str, Any], grade: Any, seconds: float
) -> dict[str, Any]:
    """The results.jsonl row of one graded prediction: the outcome, the agent's facts, and the integrity
    fields (tamper records, the official verdict beside ours) that summary.json's ``integrity`` reads."""
    from swe_rl.metrics.integrity import rollout_integrity

    return {
        "instance_id": instance_id,
        "status": grade.status.value,
        "resolved": grade.resolved,
        "exit_reason": facts["exit_reason"],
        "steps": facts["steps"],
        "harness": "mini-swe-agent",
        "prompt_tokens": facts["prompt_tokens"],
        "completion_tokens": facts["completion_tokens"],
        "agent_seconds": round(facts["agent_seconds"], 3),
        "grade_seconds": round(seconds, 3),
        "patch_bytes": len(patch.encode()),
        "error": facts["error"],
        "grade_message": grade.message or None,
        "dir": "",
        "patch_sha": patch_digest(patch),
        "minisweagent_exit_status": facts["exit_status"],
        "apply_strategy": grade.apply_strategy,
        "eval_log": bool(grade.test_log),
        **rollout_integrity(None, grade),
    }


async def grade_all(
    args: argparse.Namespace, pool_env: dict[str, str] | None = None, stop: CleanStop | None = None
) -> dict[str, Any]:
    from swe_rl.agent.fleet_session import FleetConfig, open_fleet
    from swe_rl.grading import GradeResult, GradeStatus
    from swe_rl.grading.artifacts import write_grade_artifacts
    from swe_rl.grading.config import GraderConfig
    from swe_rl.tasks import load_instances

    preds: dict[str, dict[str, Any]] = {}
    for path in args.preds:
        preds.update(load_predictions(path))
    loaded = load_instances(
        args.data, image_template=args.image_template, instance_ids=list(preds), split=args.split
    )
    for err in loaded.errors:
        print(f"warning: skipped bad row: {err}", file=sys.stderr)
    for iid in loaded.missing_ids:
        print(f"warning: {iid}: in the predictions but not in --data; not graded", file=sys.stderr)
    instances = loaded.instances

    run_dir: Path = args.output_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    results_path = run_dir / "results.jsonl"
    previous = {} if args.no_resume else last_rows(results_path)
    stop = (stop or CleanStop()).install()
    history = RunHistory(run_dir, fresh=args.no_resume)
    history.begin(command_line("swe_rl.eval.grade_predictions", getattr(args, "argv", None)))
    graded_now = 0
    if results_path.exists() and results_path.stat().st_size:  # end a torn line of an interrupted run
        with results_path.open("rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")

    models = sorted({p["model_name_or_path"] for p in preds.values() if p["model_name_or_path"]})
    meta: dict[str, Any] = {"harness": "mini-swe-agent", "model": ", ".join(models) or "?"}
    for path in args.preds:  # settings recorded by eval/run_minisweagent.py, when there
        run_info = path.parent / "minisweagent_run.json"
        if run_info.exists():
            info = json.loads(run_info.read_text())
            meta.update({k: info.get(k) for k in ("minisweagent_version", "api_base", "step_limit")})
            break
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                **meta,
                "preds": [str(p) for p in args.preds],
                "data": str(args.data),
                "instances": len(instances),
                "started": time.time(),
            },
            indent=1,
        )
    )

    todo = []
    for inst in instances:
        pred = preds[inst.instance_id]
        old = previous.get(inst.instance_id)
        if (
            old
            and old.get("status") != "env_error"
            and old.get("patch_sha") == patch_digest(pred["model_patch"])
        ):
            continue
        todo.append(inst)
    if len(todo) < len(instances):
        print(f"resume: {len(instances) - len(todo)} of {len(instances)} predictions already graded")

    fleet_config = FleetConfig.for_pool(
        pool_env, grading=GraderConfig(eval_timeout=args.eval_timeout, network=args.grading_network)
    )
    sem = asyncio.Semaphore(max(1, args.max_concurrent))
    started = time.monotonic()

    async with open_fleet(fleet_config) as fleet:
        grader = fleet.grader

        async def one(inst: Any) -> None:
            pred = preds[inst.instance_id]
            patch = pred["model_patch"]
            traj = read_trajectory(pred["run_dir"], inst.instance_id)
            facts = trajectory_facts(traj)
            t0 = time.monotonic()
            try:
                if facts["infra_failure"]:
                    grade = GradeResult(
                        instance_id=inst.instance_id,
                        status=GradeStatus.ENV_ERROR,
                        resolved=False,
                        message=f"agent environment: {facts['error']}",
                    )
                else:
                    async with sem:
                        grade = await grader.grade(inst, patch)
                seconds = time.monotonic() - t0
                out = write_artifacts(run_dir, inst, patch, facts, grade, traj, meta, seconds)
                row = prediction_row(inst.instance_id, patch, facts, grade, seconds)
                row["dir"] = str(out.relative_to(run_dir))
                write_grade_artifacts(out, grade, grade_seconds=round(seconds, 3))  # eval.log + report.json
            except Exception as exc:
                log.exception("grading %s failed", inst.instance_id)
                row = {
                    "instance_id": inst.instance_id,
                    "status": "env_error",
                    "resolved": False,
                    "exit_reason": facts["exit_reason"],
                    "steps": facts["steps"],
                    "error": f"grading: {type(exc).__name__}: {exc}",
                    "dir": "",
                    "patch_sha": patch_digest(patch),
                }
            with results_path.open("a") as fh:  # one whole line per instance: resume-safe
                fh.write(json.dumps(row) + "\n")
            print(f"{inst.instance_id}: {row['status']}", flush=True)
            nonlocal graded_now
            graded_now += 1

        try:
            await stop.run_all(one(i) for i in todo)
        finally:
            stop.uninstall()
    history.end(finished=graded_now, interrupted=stop.signal_name)

    summary = summarize(
        results_path,
        [i.instance_id for i in instances],
        meta,
        wall_seconds=time.monotonic() - started,
        load_errors=len(loaded.errors),
    )
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    write_report(run_dir, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    sigterm_as_interrupt()  # start-up: a SIGTERM still lets the local fleet clean up
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        from swe_rl.eval.grading_hooks import local_fleet_networks, run_graders

        summary = run_graders(
            lambda *env: grade_all(args, *env),
            local_fleet=args.local_fleet,
            max_concurrent=args.max_concurrent,
            networks=local_fleet_networks(args, args.grading_network) if args.local_fleet else [],
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the run's own handler was in place, or a repeated Ctrl-C
        print(
            f"\ninterrupted; run the same command again to resume: "
            f"{command_line('swe_rl.eval.grade_predictions', args.argv)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "total",
                    "resolved",
                    "resolve_rate",
                    "no_patch_rate",
                    "patch_apply_failed_rate",
                    "error_rate",
                    "status_counts",
                )
            },
            indent=1,
        )
    )
    print(f"report: {args.output_dir / 'report.html'}")
    if summary.get("interrupted"):
        print(
            resume_line(
                summary["interrupted"],
                summary["finished"],
                summary["total"],
                command_line("swe_rl.eval.grade_predictions", args.argv),
                what="predictions",
            ),
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
