"""What grade-predictions reads: a predictions file and the mini-swe-agent trajectories next to it.

`load_predictions` takes any SWE-bench prediction format (a dict keyed by instance id, a list of
``{instance_id, model_patch}`` rows, or a ``.jsonl`` of them); `read_trajectory` finds a prediction's
trajectory (``<run>/<id>/<id>.traj.json``) and `trajectory_facts` turns it into the row's exit reason,
steps, tokens and time (an instance whose container never started is an infrastructure failure).
`patch_digest` names a patch, so that a resumed run keeps the rows graded for the same patch.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["EXIT_REASONS", "load_predictions", "patch_digest", "read_trajectory", "trajectory_facts"]

# mini-swe-agent's exit statuses -> our exit reasons (anything else is an exception's name).
EXIT_REASONS = {
    "Submitted": "submitted",
    "LimitsExceeded": "step_limit",
    "TimeExceeded": "deadline",
    "RepeatedFormatError": "format_errors",
    "FormatError": "format_errors",
}


def load_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """instance_id -> {"model_patch", "model_name_or_path", "run_dir"} from any SWE-bench prediction format."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        data = json.loads(text)
        rows = list(data.values()) if isinstance(data, dict) else data
    preds = {}
    for row in rows:
        if not isinstance(row, dict) or not row.get("instance_id"):
            raise ValueError(f"{path}: a prediction without instance_id: {str(row)[:200]}")
        preds[row["instance_id"]] = {
            "model_patch": row.get("model_patch") or "",
            "model_name_or_path": row.get("model_name_or_path"),
            "run_dir": path.parent,
        }
    return preds


def read_trajectory(run_dir: Path, instance_id: str) -> dict[str, Any] | None:
    path = run_dir / instance_id / f"{instance_id}.traj.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def trajectory_facts(traj: dict[str, Any] | None) -> dict[str, Any]:
    """Exit reason, steps, tokens and time of a mini-swe-agent trajectory (zeros when there is none)."""
    if traj is None:
        return {
            "exit_status": None,
            "exit_reason": "unknown",
            "steps": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "agent_seconds": 0.0,
            "error": None,
            "infra_failure": False,
        }
    info = traj.get("info", {})
    ours = info.get("swe_rl", {})
    status = info.get("exit_status")
    prompt = completion = 0
    stamps = []
    for msg in traj.get("messages", []):
        extra = msg.get("extra") or {}
        if "timestamp" in extra:
            stamps.append(extra["timestamp"])
        usage = (extra.get("response") or {}).get("usage") or {}
        prompt += int(usage.get("prompt_tokens") or 0)
        completion += int(usage.get("completion_tokens") or 0)
    seconds = ours.get("agent_seconds")
    if seconds is None:
        seconds = (max(stamps) - min(stamps)) if len(stamps) > 1 else 0.0
    error = ours.get("exception_str") or info.get("exception_str")
    if status and status not in EXIT_REASONS and not error:
        error = status
    return {
        "exit_status": status,
        "exit_reason": EXIT_REASONS.get(
            status, "env_error" if ours.get("failed_in") else "policy_error" if status else "unknown"
        ),
        "steps": int(info.get("model_stats", {}).get("api_calls") or 0),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "agent_seconds": float(seconds),
        "error": error,
        "infra_failure": bool(ours.get("failed_in")),
    }


def patch_digest(patch: str) -> str:
    return hashlib.sha256(patch.encode()).hexdigest()[:16]
