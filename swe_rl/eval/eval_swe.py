"""Evaluate a model (any OpenAI-compatible endpoint) or a reference policy on SWE task files.

No training loop: load instances, run the agent on each in a leased container,
grade its patch in a fresh container, write artifacts and a summary.

    python eval/eval_swe.py --data data/fixtures/instances.jsonl --policy gold --local-fleet \
        --output-dir output/eval_runs/gold

    python eval/eval_swe.py --data ~/swe_verified/verified_eval.jsonl \
        --model openai/Qwen/Qwen3-32B --api-base http://ROUTER:8000/v1 \
        --output-dir output/eval_runs/qwen3-32b --max-concurrent 8 --step-limit 50

Per instance: `<output-dir>/<instance_id>__<ts>/{traj.json,patch.diff,meta.json,eval.log,report.json}`; per run:
`results.jsonl` (one row per finished instance), `summary.json`, `report.html`.
Resume is on by default: instances with a final row in results.jsonl are skipped;
those that ended in `env_error` (an infrastructure failure) are run again.
Ctrl-C (or SIGTERM) stops cleanly: no new instances, the running ones are cancelled (their
containers released), summary.json/report.html are written for what finished, exit code 130
and one line saying how to resume; `runs.jsonl` keeps every invocation, so the summary's
wall time and per-run breakdown add up across resumes (`clean_stop.py`, `run_history.py`).
Before the first instance, the model endpoint is checked (`endpoint_check.py`): it answers, serves
`--model` and takes the key. An instance whose endpoint failed mid-run (no answer, 5xx, key or model
refused) is `env_error` and is not graded; the endpoint is then checked again, and when it fails
the run stops there (exit 3, the rest left for a resume) instead of playing every instance into env_error.
Exit codes: 0; 2 when `--local-fleet` lacks the `server` extra; 3 when more than `--max-env-error-rate`
(default 0: any) of the instances ended in `env_error` (their figures are no score: the reasons are
printed, a resume runs those instances again); 4 when the endpoint check failed; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
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
    say_stopping,
    sigterm_as_interrupt,
)
from swe_rl.eval.eval_args import instance_ids, make_policy, parse_args
from swe_rl.eval.grading_hooks import LOCAL_FLEET_STOP, grade_extras, local_fleet_networks
from swe_rl.eval.progress import StatusBar
from swe_rl.eval.report import summarize, write_report
from swe_rl.eval.run_data import load_run_instances
from swe_rl.eval.run_history import RunHistory
from swe_rl.eval.tool_call_watch import ToolCallWatch
from swe_rl.metrics.integrity import rollout_integrity
from swe_rl.metrics.rollout import episode_stats
from swe_rl.tasks.swebench4 import ConversionUnavailable

log = logging.getLogger("eval_swe")
RETRY_STATUSES = {"env_error"}  # infrastructure failures are run again on resume
EXIT_ENV_ERROR = 3
"""Exit code of a run where instances ended in env_error: the figures are not a score of the policy."""
ENDPOINT_LOST = "endpoint lost"
"""The stop reason (``summary.json`` ``interrupted``) of a run stopped because its endpoint went away."""
EXIT_ENDPOINT = 4
"""Exit code when the model endpoint failed its check before the first instance (nothing ran)."""


class EndpointWatch:
    """After an instance lost to the policy endpoint, check the endpoint again (one check at a time):
    when it fails now, stop the run (``ENDPOINT_LOST``) instead of playing every remaining instance
    into env_error; a resume runs them once the endpoint is back."""

    def __init__(self, api_base: str | None, model: str, api_key: str) -> None:
        self.api_base, self.model, self.api_key = api_base, model, api_key
        self._lock = asyncio.Lock()

    async def recheck(self, stop: CleanStop) -> None:
        from swe_rl.eval.endpoint_check import EndpointProblem, check_endpoint

        if self.api_base is None or stop.stopped or self._lock.locked():
            return
        async with self._lock:
            try:
                await asyncio.to_thread(check_endpoint, self.api_base, self.model, self.api_key)
            except EndpointProblem as exc:
                if not stop.stopped:
                    print(f"\nerror: the endpoint failed mid-run: {exc}", file=sys.stderr, flush=True)
                    stop.request(ENDPOINT_LOST)


def finished_ids(results_path: Path) -> set[str]:
    """Instances whose last row is final (not an infrastructure failure)."""
    last: dict[str, str] = {}
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            try:
                row = json.loads(line)
                last[row["instance_id"]] = row["status"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a torn last line of an interrupted run
    return {i for i, status in last.items() if status not in RETRY_STATUSES}


def _end_torn_line(path: Path) -> None:
    """An interrupted run may have left half a line: end it so the next row starts on its own line."""
    if path.exists() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


def write_artifacts(run_dir: Path, instance: Any, result: Any, meta: dict[str, Any]) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    out = run_dir / f"{instance.instance_id}__{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    traj = {
        "instance_id": instance.instance_id,
        "status": result.status.value,
        "resolved": result.resolved,
        **result.agent.model_dump(mode="json", exclude={"instance_id", "patch"}),
        "grade": result.grade.model_dump(mode="json"),
    }
    (out / "traj.json").write_text(json.dumps(traj, indent=1, ensure_ascii=False))
    (out / "patch.diff").write_text(result.agent.patch)
    (out / "meta.json").write_text(
        json.dumps(
            {
                **meta,
                "instance_id": instance.instance_id,
                "image": instance.image,
                "data_source": instance.data_source,
                "agent_seconds": result.agent_seconds,
                "grade_seconds": result.grade_seconds,
            },
            indent=1,
        )
    )
    return out


def result_row(instance: Any, result: Any, out: Path, run_dir: Path) -> dict[str, Any]:
    usage = result.agent.usage
    return {
        "instance_id": instance.instance_id,
        "status": result.status.value,
        "resolved": result.resolved,
        "exit_reason": result.agent.exit_reason.value,
        "steps": len(result.agent.steps),
        "harness": result.agent.harness,
        "format_errors": result.agent.format_errors,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "agent_seconds": round(result.agent_seconds, 3),
        "grade_seconds": round(result.grade_seconds, 3),
        "policy_seconds": round(sum(s.policy_seconds for s in result.agent.steps), 3),
        "exec_seconds": round(sum(s.exec_seconds for s in result.agent.steps), 3),
        "patch_bytes": len(result.agent.patch.encode()),
        "error": result.agent.error or None,
        "grade_message": result.grade.message or None,
        "dir": str(out.relative_to(run_dir)),
        "data_source": instance.data_source,
        "repo_language": str(
            instance.extra.get("repo_language") or instance.extra.get("language") or "python"
        ).lower(),
        "episode": episode_stats(result.agent, result.grade_seconds),
        **rollout_integrity(result.agent, result.grade),
    }


async def run(
    args: argparse.Namespace, pool_env: dict[str, str] | None = None, stop: CleanStop | None = None
) -> dict[str, Any]:
    from swe_rl.agent import AgentConfig, run_instance
    from swe_rl.agent.fleet_session import FleetConfig, open_fleet
    from swe_rl.fleet.prefetch_hints import PrefetchHints
    from swe_rl.grading.clean_store import found_beside
    from swe_rl.grading.config import GraderConfig
    from swe_rl.grading.integrity import IntegrityConfig
    from swe_rl.harnesses.registry import harness_by_name

    loaded = load_run_instances(  # 4.x-schema rows converted (ConversionUnavailable: main says how)
        args.data,
        split=args.split,
        image_template=args.image_template,
        instance_ids=instance_ids(args.instance_ids),
        limit=args.max_instances,
    )
    instances = loaded.instances
    ledger = None
    if args.certified_only:
        from swe_rl.eval.grading_hooks import keep_certified

        instances, ledger = keep_certified(instances, args.certified_only)
    run_dir: Path = args.output_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    results_path = run_dir / "results.jsonl"
    stop = (stop or CleanStop()).install()
    history = RunHistory(run_dir, fresh=args.no_resume)
    history.begin(command_line("swe_rl.eval.eval_swe", getattr(args, "argv", None)))
    done = set() if args.no_resume else finished_ids(results_path)
    _end_torn_line(results_path)
    todo = [i for i in instances if i.instance_id not in done]
    if done:
        print(f"resume: {len(instances) - len(todo)} of {len(instances)} instances already finished")

    policy = make_policy(args)
    harness = harness_by_name(args.harness, args.harness_config)
    config = AgentConfig(
        step_limit=args.step_limit,
        command_timeout=args.command_timeout,
        deadline=args.deadline,
        env_options={"network": args.agent_network} if args.agent_network else {},
        git_hygiene=not args.no_git_hygiene,
    )
    meta = {
        "policy": args.policy,
        "model": args.model if args.policy == "chat" else args.policy,
        "api_base": args.api_base,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_tokens": args.max_tokens,
        "step_limit": args.step_limit,
        "command_timeout": args.command_timeout,
        "harness": args.harness,
        "grading_network": args.grading_network,
        "agent_network": args.agent_network,
        "certified_only": args.certified_only,
        "integrity": not args.no_integrity,
        "git_hygiene": not args.no_git_hygiene,
    }
    (run_dir / "run.json").write_text(
        json.dumps(
            {**meta, "data": str(args.data), "instances": len(instances), "started": time.time()}, indent=1
        )
    )
    fleet_config = FleetConfig.for_pool(
        pool_env,
        grading=GraderConfig(
            eval_timeout=args.eval_timeout,
            network=args.grading_network,
            clean_store=found_beside(args.certified_only),  # certification's answers, else SWE_CLEAN_STORE
            integrity=IntegrityConfig(
                enable=not args.no_integrity, official_verdict=not args.no_official_verdict
            ),
        ),
        env_options=dict(config.env_options),
    )
    sem = asyncio.Semaphore(max(1, args.max_concurrent))
    progress = StatusBar(len(todo), disabled=args.no_progress)
    started = time.monotonic()
    watch = ToolCallWatch(
        harness, chat_policy=args.policy == "chat", after=args.tool_call_check, endpoint=args.api_base
    )
    finished_now = 0
    endpoint_watch = EndpointWatch(args.api_base, args.model, args.api_key)

    async with open_fleet(fleet_config) as fleet:
        hints = PrefetchHints(
            fleet.client.prefetch, [(i.instance_id, i.image) for i in todo], args.prefetch_ahead
        )
        hints.after(None)

        async def one(instance: Any) -> None:
            try:
                async with sem:
                    hints.after(instance.instance_id)
                    result = await run_instance(
                        instance,
                        policy,
                        harness,
                        client=fleet.client,
                        config=config,
                        grader=fleet.grader,
                        env_factory=fleet.env_factory,
                    )
                out = write_artifacts(run_dir, instance, result, meta)
                row = result_row(instance, result, out, run_dir)
                row.update(grade_extras(out, result, ledger))
                watch.observe(result.agent)
            except Exception as exc:
                log.exception("instance %s failed", instance.instance_id)
                row = {
                    "instance_id": instance.instance_id,
                    "status": "env_error",
                    "resolved": False,
                    "exit_reason": "crash",
                    "steps": 0,
                    "error": f"{type(exc).__name__}: {exc}",
                    "dir": "",
                }
            with results_path.open("a") as fh:  # one whole line per instance: resume-safe
                fh.write(json.dumps(row) + "\n")
            nonlocal finished_now
            finished_now += 1
            progress.update(row["status"])
            if "PolicyUnreachable" in str(row.get("error")) and args.policy == "chat":
                await endpoint_watch.recheck(stop)

        try:
            await stop.run_all(one(i) for i in todo)
        finally:
            stop.uninstall()
    progress.close()
    history.end(finished=finished_now, interrupted=stop.signal_name)

    summary = summarize(
        results_path,
        [i.instance_id for i in instances],
        meta,
        wall_seconds=time.monotonic() - started,
        load_errors=loaded.load_errors,
    )
    summary["warnings"] = watch.warnings
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
    if args.policy == "chat" and not args.no_endpoint_check:
        from swe_rl.eval.endpoint_check import EndpointProblem, check_endpoint

        try:
            for warning in check_endpoint(args.api_base, args.model, args.api_key):
                print(f"warning: {warning}", file=sys.stderr)
        except EndpointProblem as exc:
            print(f"error: {exc}; nothing was run", file=sys.stderr)
            return EXIT_ENDPOINT
    if args.local_fleet:
        from swe_rl.fleet.local import MissingServerExtra, check_server_modules

        try:
            check_server_modules()
        except MissingServerExtra as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        if args.local_fleet:
            from swe_rl.fleet.local import LocalFleet

            with LocalFleet(
                exec_servers=args.exec_servers,
                max_containers_per_node=max(4, 2 * args.max_concurrent),
                networks=local_fleet_networks(args, args.grading_network, args.agent_network),
            ) as fleet:
                summary = asyncio.run(run(args, fleet.client_env()))
                if summary.get("interrupted"):
                    say_stopping(LOCAL_FLEET_STOP)
        else:
            summary = asyncio.run(run(args))
    except ConversionUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the run's own handler was in place (start-up) or a repeated Ctrl-C
        print(
            f"\ninterrupted; run the same command again to resume: {command_line('swe_rl.eval.eval_swe', args.argv)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(json.dumps(final_printout(summary), indent=1))
    print(f"report: {args.output_dir / 'report.html'}")
    if summary.get("interrupted") == ENDPOINT_LOST:  # an outage: never a result, whatever the threshold
        env_error_exit(summary, args)
        print(
            resume_line(
                ENDPOINT_LOST,
                summary["finished"],
                summary["total"],
                command_line("swe_rl.eval.eval_swe", args.argv),
            ),
            file=sys.stderr,
        )
        return EXIT_ENV_ERROR
    if summary.get("interrupted"):
        print(
            resume_line(
                summary["interrupted"],
                summary["finished"],
                summary["total"],
                command_line("swe_rl.eval.eval_swe", args.argv),
            ),
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return env_error_exit(summary, args)


def env_error_exit(summary: dict[str, Any], args: argparse.Namespace) -> int:
    """The exit code of a finished run: 3 when more than ``--max-env-error-rate`` of its instances
    ended in env_error (an outage, not a score: said on stderr with the first reasons), else 0."""
    errors = summary["status_counts"].get("env_error", 0)
    if not errors:
        return 0
    over = errors > args.max_env_error_rate * summary["total"]
    note = env_error_note(
        errors, summary["total"], args.output_dir / "results.jsonl", local_fleet=args.local_fleet
    )
    if not over:
        note = (
            "warning"
            + note.removeprefix("error")
            + (f"\n(within --max-env-error-rate {args.max_env_error_rate}: exit 0)")
        )
    print(note, file=sys.stderr)
    return EXIT_ENV_ERROR if over else 0


def final_printout(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures printed at the end: summary.json's headline, format-error totals included."""
    keys = ("total", "resolved", "resolve_rate", "no_patch_rate", "patch_apply_failed_rate", "error_rate")
    out = {k: summary[k] for k in (*keys, "status_counts", "integrity")}
    if "env_error_kinds" in summary:
        out["env_error_kinds"] = summary["env_error_kinds"]
    formats = summary.get("format_errors") or {}
    out["format_errors"] = {k: v for k, v in formats.items() if k != "by_harness"}
    return out


def env_error_note(
    errors: int, total: int, results_path: Path, shown: int = 3, local_fleet: bool = False
) -> str:
    """What a run with env_error rows tells its user: how many, the first reasons, how to go on
    (with the command that builds or pulls the images when they were missing)."""
    from swe_rl.eval.image_hint import image_hint
    from swe_rl.eval.report import last_rows

    rows = [r for r in last_rows(results_path).values() if r.get("status") == "env_error"]
    messages = [r.get("grade_message") or r.get("error") or "?" for r in rows]
    reasons = [f"  {r['instance_id']}: {m}" for r, m in zip(rows[:shown], messages, strict=False)]
    hint = image_hint(messages, local_fleet)
    return "\n".join(
        [
            f"error: {errors} of {total} instances ended in env_error (an infrastructure failure, not a "
            f"score of the policy); first reasons:",
            *reasons,
            *([hint] if hint else []),
            "fix the cause and run the same command again: the env_error instances run again (resume)",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
