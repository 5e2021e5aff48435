"""The figures a SWE-RL run is watched by, computed per trajectory (never per step sample).

Pure functions, no slime: a batch is first turned into `TrajectorySummary` records, then `figures()`
turns the records into a flat ``{name: number}`` dict. Two sources give the same records
(`swe_rl.metrics.trajectories`, re-exported here), so training and the standalone eval show the same
figures under the same names:

- `trajectories_from_samples` — slime samples made by `swe_rl.slime.e2e.generate`, grouped by
  ``rollout_id`` (else ``index``): a trajectory is one sample per context segment (or per policy turn);
- `trajectories_from_rows` — the rows of an eval run's ``results.jsonl`` (`eval/eval_swe.py`).

Every name and what a healthy run looks like: ``docs/metrics.md``. Metadata is read defensively:
a figure whose inputs no trajectory carries is left out rather than reported as 0.
`episode_stats` is what the plugin and the eval record per episode for the turn and infrastructure figures.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from typing import Any

from swe_rl.metrics.trajectories import TrajectorySummary, trajectories_from_rows, trajectories_from_samples

__all__ = [
    "STATUSES",
    "TrajectorySummary",
    "episode_stats",
    "figures",
    "percentile",
    "trajectories_from_rows",
    "trajectories_from_samples",
]

STATUSES = ("resolved", "unresolved", "no_patch", "patch_apply_failed", "eval_timeout", "env_error")
"""Grade statuses, each with an ``outcome/<status>_rate``."""
BREAKDOWN = {
    "trajectories": "trajectories",
    "resolved_rate": "outcome/resolved_rate",
    "no_patch_rate": "outcome/no_patch_rate",
    "patch_apply_failed_rate": "outcome/patch_apply_failed_rate",
    "removed_rate": "removed_rate",
    "turns_mean": "behaviour/turns_mean",
    "format_error_rate": "behaviour/format_error_rate",
}
"""Figures repeated per harness and per data source when the batch mixes several (short name: full name)."""


# --------------------------------------------------------------------------- recording


def episode_stats(agent: Any, grade_seconds: float | None) -> dict[str, Any]:
    """What one episode (an `AgentResult`) contributes to the dashboard beyond its grade, as kept in
    ``metadata["swe"]["episode"]`` (training) and the ``episode`` of a results row (eval)."""
    steps = list(getattr(agent, "steps", None) or [])
    answered = [
        s for s in steps if getattr(s, "action", None) is not None or getattr(s, "format_error", None)
    ]
    return {
        "turns": len(answered),
        "allocate_seconds": _round(getattr(agent, "allocate_seconds", None)),
        "exec_seconds": _round(sum(float(getattr(s, "exec_seconds", 0.0) or 0.0) for s in steps)),
        "grade_seconds": _round(grade_seconds),
        "model_seconds_per_turn": [_round(float(getattr(s, "policy_seconds", 0.0) or 0.0)) for s in answered],
        "warm": getattr(agent, "warm", None),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


# --------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)])


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _spread(out: dict[str, float], name: str, values: Sequence[float], stats: Sequence[str]) -> None:
    if not values:
        return
    for stat in stats:
        if stat == "mean":
            out[f"{name}_mean"] = statistics.fmean(values)
        elif stat == "max":
            out[f"{name}_max"] = float(max(values))
        else:
            out[f"{name}_{stat}"] = percentile(values, float(stat[1:]))


def _key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(name)).strip("_") or "unknown"


def figures(trajectories: Sequence[TrajectorySummary], *, breakdowns: bool = True) -> dict[str, float]:
    """Every dashboard figure of a batch of trajectories (names: ``docs/metrics.md``); with `breakdowns`,
    the `BREAKDOWN` figures again per harness, per data source and per language when the batch mixes several."""
    out: dict[str, float] = {
        "trajectories": float(len(trajectories)),
        "samples": float(sum(t.samples for t in trajectories)),
    }
    if not trajectories:
        return out
    finished = [t for t in trajectories if t.finished]
    swe = [t for t in finished if t.swe]
    scored = [t for t in finished if t.scored]
    removed = [t for t in finished if t.removed]
    out["aborted_rate"] = _rate(len(trajectories) - len(finished), len(trajectories))
    out["removed_rate"] = _rate(len(removed), len(finished))
    for reason in sorted({t.removed_reason or "unknown" for t in removed}):
        out[f"removed/{_key(reason)}_rate"] = _rate(
            sum(1 for t in removed if (t.removed_reason or "unknown") == reason), len(finished)
        )
    for kind in sorted({t.env_error_kind for t in removed if t.env_error_kind}):
        out[f"removed/env_error/{_key(kind)}_count"] = float(
            sum(1 for t in removed if t.env_error_kind == kind)
        )
    _outcome(out, swe, scored)
    _behaviour(out, swe, scored)
    _infra(out, swe)
    _integrity_figures(out, swe)
    _prm_figures(out, scored)
    if breakdowns:
        for field_name, prefix in (
            ("harness", "by_harness"),
            ("data_source", "by_source"),
            ("language", "by_language"),
        ):
            _breakdown(out, finished, field_name, prefix)
    return out


def _outcome(out: dict[str, float], swe: list[TrajectorySummary], scored: list[TrajectorySummary]) -> None:
    graded = [t for t in swe if t.status]
    if graded:
        for status in STATUSES:
            out[f"outcome/{status}_rate"] = _rate(sum(1 for t in graded if t.status == status), len(graded))
            out[f"outcome/count/{status}"] = float(sum(1 for t in graded if t.status == status))
    rewarded = [t for t in scored if t.reward is not None]
    if rewarded:
        rewards = [t.reward for t in rewarded if t.reward is not None]
        out["outcome/reward_mean"] = statistics.fmean(rewards)
        out["outcome/reward_std"] = statistics.pstdev(rewards)
    groups: dict[Any, list[TrajectorySummary]] = {}
    for t in rewarded:
        if t.group is not None:
            groups.setdefault(t.group, []).append(t)
    if not groups or max(len(g) for g in groups.values()) < 2:
        return  # no prompt groups (eval, one sample per prompt): group figures mean nothing
    stds = [statistics.pstdev([t.reward for t in g if t.reward is not None]) for g in groups.values()]
    out["outcome/groups"] = float(len(groups))
    out["outcome/group_reward_std_mean"] = statistics.fmean(stds)
    out["outcome/zero_variance_group_rate"] = _rate(sum(1 for s in stds if s < 1e-9), len(groups))
    out["outcome/all_fail_group_rate"] = _rate(
        sum(1 for g in groups.values() if not any(t.resolved for t in g)), len(groups)
    )
    out["outcome/all_pass_group_rate"] = _rate(
        sum(1 for g in groups.values() if all(t.resolved for t in g)), len(groups)
    )


def _behaviour(out: dict[str, float], swe: list[TrajectorySummary], scored: list[TrajectorySummary]) -> None:
    kept = [t for t in scored if t.swe]
    _spread(
        out, "behaviour/turns", [t.turns for t in kept if t.turns is not None], ("mean", "p50", "p90", "max")
    )
    counted = [t for t in kept if t.turns is not None and t.format_errors is not None]
    if counted:
        out["behaviour/format_error_rate"] = _rate(
            sum(t.format_errors or 0 for t in counted), sum(t.turns or 0 for t in counted)
        )
    exits = [t.exit_reason for t in kept if t.exit_reason]
    for reason in sorted(set(exits)):
        out[f"behaviour/exit/{_key(reason)}_rate"] = _rate(exits.count(reason), len(exits))
    known = [t for t in kept if t.truncated is not None]
    if known:
        out["behaviour/truncated_rate"] = _rate(sum(1 for t in known if t.truncated), len(known))
    compacted = [t for t in kept if t.compacted is not None]
    if compacted:
        out["behaviour/compacted_rate"] = _rate(sum(1 for t in compacted if t.compacted), len(compacted))
    _spread(out, "behaviour/segments", [t.segments for t in kept if t.segments is not None], ("mean", "max"))
    _spread(
        out,
        "behaviour/sampled_tokens",
        [t.sampled_tokens for t in kept if t.sampled_tokens is not None],
        ("mean", "p50", "p90", "max"),
    )


def _infra(out: dict[str, float], swe: list[TrajectorySummary]) -> None:
    for name in ("allocate_seconds", "exec_seconds", "grade_seconds"):
        _spread(
            out,
            f"infra/{name}",
            [getattr(t, name) for t in swe if getattr(t, name) is not None],
            ("p50", "p90"),
        )
    _spread(
        out,
        "infra/model_seconds_per_turn",
        [x for t in swe for x in t.model_seconds_per_turn],
        ("mean", "p50", "p90"),
    )
    known = [t.warm for t in swe if t.warm is not None]
    if known:
        out["infra/warm_hit_rate"] = _rate(sum(1 for w in known if w), len(known))


def _integrity_figures(out: dict[str, float], swe: list[TrajectorySummary]) -> None:
    known = [t for t in swe if t.tampered is not None]
    if known:
        out["integrity/tampered_rate"] = _rate(sum(1 for t in known if t.tampered), len(known))
    for name in ("voided", "canary_tripped", "twin_tripped", "capability_flagged"):
        seen = [t for t in swe if getattr(t, name) is not None]
        if seen:
            out[f"integrity/{name}_rate"] = _rate(sum(1 for t in seen if getattr(t, name)), len(seen))
    flagged = [t for t in swe if t.flags is not None]
    if flagged:
        out["integrity/flagged_rate"] = _rate(sum(1 for t in flagged if t.flags), len(flagged))
        for flag in sorted({f for t in flagged for f in t.flags or []}):
            out[f"integrity/flag/{_key(flag)}_rate"] = _rate(
                sum(1 for t in flagged if flag in (t.flags or [])), len(flagged)
            )
    skips = sum(1 for t in swe if t.certification_skip)
    if skips:
        out["integrity/certification_skips"] = float(skips)


def _prm_figures(out: dict[str, float], scored: list[TrajectorySummary]) -> None:
    judged = [t for t in scored if t.prm_scores is not None]
    if not judged:
        return
    scores = [s for t in judged for s in t.prm_scores or []]
    failures = sum(t.prm_failures or 0 for t in judged)
    out["prm/steps_scored"] = float(len(scores))
    out["prm/judge_failures"] = float(failures)
    out["prm/judge_failure_rate"] = _rate(failures, failures + len(scores))
    if scores:
        out["prm/step_score_mean"] = statistics.fmean(scores)


def _breakdown(
    out: dict[str, float], finished: list[TrajectorySummary], field_name: str, prefix: str
) -> None:
    values = sorted({getattr(t, field_name) for t in finished if getattr(t, field_name)})
    if len(values) < 2:
        return
    for value in values:
        part = figures([t for t in finished if getattr(t, field_name) == value], breakdowns=False)
        for short, name in BREAKDOWN.items():
            if name in part:
                out[f"{prefix}/{_key(value)}/{short}"] = part[name]
