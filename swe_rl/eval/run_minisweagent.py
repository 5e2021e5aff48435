"""Run mini-swe-agent (the pinned PyPI release, `minisweagent` extra) on SWE task instances.

The second evaluation path: mini-swe-agent is the harness, the model is any OpenAI-compatible
endpoint (an SGLang router), and mini-swe-agent's own ``docker`` environment starts one
container per instance from the row's image on this node. This driver only feeds it:
instances come from any file `swe_rl.tasks.load_instances` reads (our ``verified_eval.jsonl``,
the fixtures, slime rows, parquet) or a dataset name, so image overrides and slicing behave as
in ``eval/eval_swe.py``; each instance is one mini-swe-agent ``DefaultAgent`` run.

    python eval/run_minisweagent.py --data ~/swe_verified/verified_eval.jsonl \
        --model openai/Qwen3-32B --api-base http://ROUTER:30000/v1 \
        --output output/minisweagent_runs/qwen3-32b --workers 16 --slice 0:250

Output is mini-swe-agent's batch layout, so its own tools read it: ``preds.json``
(instance_id -> {model_name_or_path, instance_id, model_patch}) and
``<instance_id>/<instance_id>.traj.json``; plus ``minisweagent_run.json`` (settings and the
instance ids of the run). Grade with ``eval/grade_predictions.py`` (our SWE-bench grader on
the fleet). Instances already in ``preds.json`` are skipped unless ``--redo-existing``.

Every container this run starts carries the label ``swe-rl.minisweagent-run=<run label>``
and is removed when its instance ends; a final sweep removes any left over.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from swe_rl.configs import config_path, resolve_config
from swe_rl.eval.mini_baseline import agent_patch, record_baseline
from swe_rl.eval.mini_instances import SUBSETS, select_instances
from swe_rl.eval.mini_instances import shard_instances as shard_instances  # re-exported: tests call them here
from swe_rl.eval.mini_instances import slice_instances as slice_instances

log = logging.getLogger("run_minisweagent")

DEFAULT_CONFIG = config_path("minisweagent_sglang_swebench.yaml")
# The text-based SWE-bench prompts shipped with the pinned mini-swe-agent; our config is layered on them.
PROMPTS_CONFIG = "swebench_backticks.yaml"
LABEL_KEY = "swe-rl.minisweagent-run"
# Written into each trajectory's info so that grading can tell infrastructure failures from the model's.
FAILED_IN_ENVIRONMENT = "environment"
# Exit statuses of a run that ended on the agent's terms; any other (an exception's name, an
# interruption) is run again on resume.
FINAL_EXITS = {"Submitted", "LimitsExceeded", "TimeExceeded", "RepeatedFormatError"}
INTERRUPTED = "Interrupted"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Run mini-swe-agent on SWE task instances (docker environment)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--data",
        help="instances file (.jsonl/.json/.parquet in any format load_instances reads) or a dataset name",
    )
    src.add_argument("--subset", help=f"dataset shortcut {sorted(SUBSETS)} or a dataset name (needs a hub)")
    p.add_argument("--split", default="test")
    p.add_argument(
        "-o", "--output", required=True, type=Path, help="run directory (preds.json, trajectories)"
    )
    p.add_argument(
        "--config",
        action="append",
        default=None,
        help="mini-swe-agent config file(s), merged in order (default: the pinned release's "
        f"{PROMPTS_CONFIG} then configs/{DEFAULT_CONFIG.name})",
    )
    p.add_argument(
        "-c",
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, e.g. agent.step_limit=50 (JSON values), applied last",
    )
    p.add_argument(
        "--model",
        default=os.environ.get("MSWEA_MODEL_NAME"),
        help="litellm model name, e.g. openai/Qwen3-32B (served name behind --api-base)",
    )
    p.add_argument(
        "--api-base", default=os.environ.get("SWE_API_BASE"), help="OpenAI-compatible base URL (…/v1)"
    )
    p.add_argument("--api-key", default=os.environ.get("SWE_API_KEY"))
    p.add_argument("-w", "--workers", type=int, default=1, help="instances run at once")
    p.add_argument(
        "--slice", dest="slice_spec", default="", help="python slice of the instance list, e.g. 0:250"
    )
    p.add_argument(
        "--shard",
        default="",
        help="I/N: this node's contiguous share (0-based I) of the selected "
        "instances, for several nodes splitting one dataset",
    )
    p.add_argument("--filter", dest="filter_spec", default="", help="regex on instance ids (re.match)")
    p.add_argument("--instance-ids", default=None, help="comma-separated ids, or @file with one id per line")
    p.add_argument("--image-template", default=None, help="image name template or registry prefix override")
    p.add_argument("--redo-existing", action="store_true", help="run instances already in preds.json again")
    p.add_argument("--run-label", default=None, help="value of the container label (default: random)")
    p.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "WARNING"))
    return p.parse_args(argv)


# ---------------------------------------------------------------------------- config


def build_config(args: argparse.Namespace, run_label: str) -> dict[str, Any]:
    """mini-swe-agent's config: the files merged in order, then our run-time settings, then -c overrides."""
    from minisweagent.config import get_config_from_spec
    from minisweagent.utils.serialize import recursive_merge

    specs = args.config or [PROMPTS_CONFIG, str(DEFAULT_CONFIG)]
    layers = [get_config_from_spec(s) for s in specs]
    runtime: dict[str, Any] = {"model": {"model_kwargs": {}}}
    if args.model:
        runtime["model"]["model_name"] = args.model
    if args.api_base:
        runtime["model"]["model_kwargs"]["api_base"] = args.api_base
    if args.api_key:
        runtime["model"]["model_kwargs"]["api_key"] = args.api_key
    config = recursive_merge(*layers, runtime, *(get_config_from_spec(o) for o in args.overrides))

    model = config.setdefault("model", {})
    registry = model.get("litellm_model_registry")
    if registry:  # our config file names the shipped registry (configs/litellm.json)
        model["litellm_model_registry"] = resolve_config(registry)
    if not model.get("model_name"):
        raise SystemExit(
            "error: no model name: pass --model (e.g. openai/<served name>) or set model.model_name"
        )
    env = config.setdefault("environment", {})
    env.setdefault("environment_class", "docker")
    if env["environment_class"] != "docker":
        raise SystemExit(
            f"error: environment_class {env['environment_class']!r}: this driver runs docker only"
        )
    env["run_args"] = [*env.get("run_args", ["--rm"]), "--label", f"{LABEL_KEY}={run_label}"]
    return config


# ---------------------------------------------------------------------------- containers


def remove_containers(label_value: str, docker: str = "docker") -> int:
    """Force-remove every container with our run label; returns how many there were."""
    found = subprocess.run(
        [docker, "ps", "-aq", "--filter", f"label={LABEL_KEY}={label_value}"],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = found.stdout.split()
    if ids:
        subprocess.run([docker, "rm", "-f", *ids], capture_output=True, check=False)
    return len(ids)


def _remove_container(env: Any) -> None:
    cid = getattr(env, "container_id", None)
    if cid:
        subprocess.run(
            [env.config.executable, "rm", "-f", cid], capture_output=True, check=False, timeout=120
        )
        env.container_id = None  # its own (background) cleanup has nothing left to do


# ---------------------------------------------------------------------------- run


class RunInterrupted(Exception):
    """The run is stopping (Ctrl-C): the instance ends at its next step and is run again on resume."""


_STOP = threading.Event()


def _stoppable_agent_class() -> type:
    from minisweagent.agents.default import DefaultAgent

    class StoppableAgent(DefaultAgent):
        """mini-swe-agent's DefaultAgent that gives up at the next step once the run is stopping."""

        def step(self) -> Any:
            if _STOP.is_set():
                raise RunInterrupted("run interrupted")
            return super().step()

    return StoppableAgent


def finished_ids(out: Path, preds: dict[str, Any]) -> set[str]:
    """Instances of preds.json whose trajectory ended on the agent's terms (not a crash or an interruption)."""
    done = set()
    for iid in preds:
        try:
            info = json.loads((out / iid / f"{iid}.traj.json").read_text()).get("info", {})
        except (OSError, json.JSONDecodeError):
            continue
        if info.get("exit_status") in FINAL_EXITS:
            done.add(iid)
    return done


class PredsFile:
    """``preds.json`` in mini-swe-agent's format, updated whole under a lock after every instance."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def put(self, instance_id: str, model_name: str, patch: str | None) -> None:
        with self._lock:
            data = self.read()
            data[instance_id] = {
                "model_name_or_path": model_name,
                "instance_id": instance_id,
                "model_patch": patch,
            }
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps(data, indent=2))
            tmp.replace(self.path)

    def drop(self, instance_id: str) -> None:
        with self._lock:
            data = self.read()
            if data.pop(instance_id, None) is not None:
                self.path.write_text(json.dumps(data, indent=2))


def run_one(instance: Any, config: dict[str, Any], out: Path, preds: PredsFile) -> str:
    """One instance: a fresh container of its image, one mini-swe-agent run, its trajectory and prediction."""
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model

    iid = instance.instance_id
    traj_path = out / iid / f"{iid}.traj.json"
    preds.drop(iid)  # no stale prediction if this run dies halfway
    traj_path.unlink(missing_ok=True)
    model = get_model(config=config.get("model", {}))
    agent = env = None
    exit_status, submission, extra = None, "", {}
    started = time.monotonic()
    try:
        try:
            env = get_environment({**config["environment"], "image": instance.image, "cwd": instance.workdir})
        except Exception as exc:
            extra = {
                "failed_in": FAILED_IN_ENVIRONMENT,
                "exception_str": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
            exit_status = type(exc).__name__
            raise
        baseline = record_baseline(
            env, instance.workdir
        )  # pre-existing untracked files stay out of the patch
        agent = _stoppable_agent_class()(model, env, **config.get("agent", {}))
        info = agent.run(instance.problem_statement)
        exit_status, submission = info.get("exit_status"), info.get("submission") or ""
        if baseline and exit_status == "Submitted":
            patch = agent_patch(env, instance.workdir)
            submission = submission if patch is None else patch
    except Exception as exc:  # noqa: BLE001 - one broken instance must not end the run
        log.error("instance %s: %s: %s", iid, type(exc).__name__, exc)
        exit_status = INTERRUPTED if isinstance(exc, RunInterrupted) else exit_status or type(exc).__name__
        extra = extra or {
            "exception_str": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    finally:
        if env is not None:
            _remove_container(env)
        record = {
            "info": {
                "exit_status": exit_status,
                "submission": submission,
                "swe_rl": {
                    "image": instance.image,
                    "agent_seconds": round(time.monotonic() - started, 3),
                    **extra,
                },
            },
            "instance_id": iid,
        }
        if agent is not None:
            agent.save(traj_path, record)
        else:
            traj_path.parent.mkdir(parents=True, exist_ok=True)
            traj_path.write_text(
                json.dumps({**record, "messages": [], "trajectory_format": "mini-swe-agent-1.1"}, indent=2)
            )
        preds.put(iid, model.config.model_name, submission)
    return str(exit_status)


def _quiet_console(level: str) -> None:
    """mini-swe-agent logs every container and call to the console: keep that for its log file."""
    mini = logging.getLogger("minisweagent")
    mini.propagate = False  # not twice (its handler and ours)
    for handler in mini.handlers:
        if not isinstance(handler, logging.FileHandler):
            handler.setLevel(level.upper())
    if level.upper() != "DEBUG":  # LiteLLM warns per model object about zero-priced registry entries
        logging.getLogger("LiteLLM").setLevel(logging.ERROR)


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price list
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    import minisweagent
    from minisweagent.utils.log import add_file_handler

    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    run_label = args.run_label or f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    config = build_config(args, run_label)
    instances = select_instances(args)
    preds = PredsFile(out / "preds.json")
    done = set() if args.redo_existing else finished_ids(out, preds.read())
    todo = [i for i in instances if i.instance_id not in done]
    if len(todo) < len(instances):
        print(f"resume: {len(instances) - len(todo)} of {len(instances)} instances already finished")
    meta = {
        "harness": "mini-swe-agent",
        "minisweagent_version": minisweagent.__version__,
        "model": config["model"]["model_name"],
        "api_base": config["model"].get("model_kwargs", {}).get("api_base"),
        "data": args.data or SUBSETS.get(args.subset, args.subset),
        "split": args.split,
        "slice": args.slice_spec or None,
        "shard": args.shard or None,
        "filter": args.filter_spec or None,
        "configs": args.config or [PROMPTS_CONFIG, str(DEFAULT_CONFIG)],
        "overrides": args.overrides,
        "step_limit": config.get("agent", {}).get("step_limit"),
        "workers": args.workers,
        "run_label": run_label,
        "started": time.time(),
        "instance_ids": [i.instance_id for i in instances],
    }
    (out / "minisweagent_run.json").write_text(json.dumps(meta, indent=1))
    _quiet_console(args.log_level)
    add_file_handler(out / "minisweagent.log", print_path=False)  # mini-swe-agent's own debug log
    (out / "minisweagent_config.json").write_text(json.dumps(config, indent=1, default=str))

    counts: dict[str, int] = {}
    _STOP.clear()
    pool = ThreadPoolExecutor(max_workers=max(1, args.workers))
    try:
        futures = {pool.submit(run_one, inst, config, out, preds): inst.instance_id for inst in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            try:
                status = fut.result()
            except Exception as exc:
                status = f"crash:{type(exc).__name__}"
                log.exception("instance %s crashed", futures[fut])
            counts[status] = counts.get(status, 0) + 1
            print(f"[{n}/{len(todo)}] {futures[fut]}: {status}", flush=True)
    except BaseException:
        # Ctrl-C: start nothing new, end running instances at their next step, then sweep.
        print("stopping: running instances end at their next step (resume picks them up)", file=sys.stderr)
        _STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        left = remove_containers(run_label)
        if left:
            log.warning("removed %d leftover container(s) labelled %s=%s", left, LABEL_KEY, run_label)
    return {"instances": len(instances), "ran": len(todo), "exit_statuses": counts, "output": str(out)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        result = run(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
