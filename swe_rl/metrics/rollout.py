"""The figures a SWE-RL run is watched by, computed per trajectory (never per step sample).

Pure functions, no slime: a batch is first turned into `TrajectorySummary` records, then `figures()`
turns the records into a flat ``{name: number}`` dict. Two sources give the same records, so
training and the standalone eval show the same figures under the same names:

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swe_rl.metrics.env_errors import env_error_kind

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
CERTIFICATION_REASONS = ("uncertified", "not_certified", "certification")
"""Removed-reason categories that mean "skipped: the instance is not certified"."""
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


@dataclass
class TrajectorySummary:
    """One played episode, whatever the number of samples it was handed to slime as."""

    key: Any
    group: Any = None
    samples: int = 1
    swe: bool = True
    """Whether it came from the SWE plugin (pivot samples carry none of the SWE fields)."""
    harness: str | None = None
    data_source: str | None = None
    language: str | None = None
    """The row's ``repo_language`` (or ``language``; ``python`` when the row has neither, as SWE-bench's)."""
    status: str | None = None
    resolved: bool = False
    removed: bool = False
    removed_reason: str | None = None
    env_error_kind: str | None = None
    """For an ``env_error``: the fault kind (`env_error_kind`), counted per kind on the dashboard."""
    aborted: bool = False
    exit_reason: str | None = None
    turns: int | None = None
    format_errors: int | None = None
    truncated: bool | None = None
    compacted: bool | None = None
    segments: int | None = None
    """Context segments of the episode (1 + compactions): training samples per trajectory with ``swe_samples: segment``."""
    sampled_tokens: int | None = None
    reward: float | None = None
    allocate_seconds: float | None = None
    exec_seconds: float | None = None
    grade_seconds: float | None = None
    model_seconds_per_turn: list[float] = field(default_factory=list)
    warm: bool | None = None
    tampered: bool | None = None
    voided: bool | None = None
    canary_tripped: bool | None = None
    twin_tripped: bool | None = None
    capability_flagged: bool | None = None
    flags: list[str] | None = None
    certification_skip: bool = False
    prm_scores: list[float] | None = None
    prm_failures: int | None = None

    @property
    def finished(self) -> bool:
        """Played to an end slime keeps (aborted requests are handed back and retried)."""
        return not self.aborted

    @property
    def scored(self) -> bool:
        """In the training statistics: neither removed nor aborted."""
        return not self.aborted and not self.removed


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


# --------------------------------------------------------------------------- sources


def _status_name(status: Any) -> str:
    return str(getattr(status, "value", status) or "").lower()


def _reward_value(sample: Any, reward_key: str | None) -> float | None:
    reward = getattr(sample, "reward", None)
    if isinstance(reward, Mapping):
        reward = reward.get(reward_key or "score")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return None
    return float(reward)


def _category(reason: Any) -> str:
    text = str(reason or "unknown").split(":", 1)[0].strip().lower()
    return re.sub(r"[^a-z0-9_]+", "_", text).strip("_") or "unknown"


def _section(info: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``info[key]`` when it is a mapping, else an empty one."""
    value = info.get(key)
    return value if isinstance(value, Mapping) else {}


def _integrity(info: Mapping[str, Any]) -> tuple[bool | None, list[str] | None]:
    """(tampered, behaviour flags) from ``swe.integrity`` or top-level ``swe.tampered`` / ``swe.flags``."""
    block = _section(info, "integrity")
    tampered = block.get("tampered", info.get("tampered"))
    flags = block.get("flags", info.get("flags"))
    if isinstance(flags, Mapping):
        flags = [k for k, v in flags.items() if v]
    if flags is not None and not isinstance(flags, (list, tuple)):
        flags = [str(flags)]
    return (None if tampered is None else bool(tampered)), (
        None if flags is None else [str(f) for f in flags]
    )


def _certification_skip(info: Mapping[str, Any]) -> bool:
    cert = info.get("certification")
    if isinstance(cert, Mapping) and cert.get("skipped"):
        return True
    return bool(info.get("removed")) and _category(info.get("removed_reason")) in CERTIFICATION_REASONS


def _prm(info: Mapping[str, Any]) -> tuple[list[float] | None, int | None]:
    prm = info.get("prm")
    if not isinstance(prm, Mapping):
        return None, None
    steps = [s for s in prm.get("steps") or [] if isinstance(s, Mapping)]
    scores = [float(s["score"]) for s in steps if s.get("status") == "scored" and s.get("score") is not None]
    failures = sum(1 for s in steps if s.get("status") in ("invalid", "failed", "timeout"))
    return scores, failures


def _from_info(traj: TrajectorySummary, info: Mapping[str, Any]) -> None:
    """Fill the SWE fields from ``metadata["swe"]`` (the plugin's) or an eval results row."""
    traj.harness = info.get("harness") or traj.harness
    traj.status = info.get("status")
    traj.resolved = bool(info.get("resolved"))
    traj.removed = traj.removed or bool(info.get("removed"))
    if traj.removed:
        traj.removed_reason = _category(info.get("removed_reason"))
        if traj.removed_reason == "env_error":
            traj.env_error_kind = env_error_kind(info.get("env_error_reason") or info.get("removed_reason"))
    traj.aborted = traj.aborted or bool(info.get("aborted"))
    traj.exit_reason = info.get("exit_reason")
    episode = _section(info, "episode")
    turns = episode.get("turns", info.get("steps"))  # answered policy turns; else agent steps
    if isinstance(turns, int):
        traj.turns = turns
    if isinstance(info.get("format_errors"), int):
        traj.format_errors = info["format_errors"]
    tokens = _section(info, "tokens")
    if isinstance(tokens.get("sampled_tokens"), int):
        traj.sampled_tokens = tokens["sampled_tokens"]
    if isinstance(tokens.get("segments"), int):
        traj.compacted = tokens["segments"] > 1
        traj.segments = tokens["segments"]
    if info.get("stop_reason") == "context_exhausted" or info.get("truncated") is True:
        traj.truncated = True
    for name in ("allocate_seconds", "exec_seconds", "grade_seconds"):
        value = episode.get(name, info.get(name))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(traj, name, float(value))
    traj.model_seconds_per_turn = [
        float(x) for x in episode.get("model_seconds_per_turn") or [] if isinstance(x, (int, float))
    ]
    if isinstance(episode.get("warm"), bool):
        traj.warm = episode["warm"]
    traj.tampered, traj.flags = _integrity(info)
    block = _section(info, "integrity")
    for name in ("voided", "canary_tripped", "twin_tripped", "capability_flagged"):
        value = block.get(name, info.get(name))
        if isinstance(value, bool):
            setattr(traj, name, value)
    traj.certification_skip = _certification_skip(info)
    traj.prm_scores, traj.prm_failures = _prm(info)


def trajectories_from_samples(
    samples: Iterable[Any], reward_key: str | None = "score"
) -> list[TrajectorySummary]:
    """Group a flat batch of slime samples into trajectories by ``rollout_id`` (``index`` when unset)."""
    grouped: dict[Any, list[Any]] = {}
    for sample in samples:
        key = getattr(sample, "rollout_id", None)
        if key is None:  # slime's own fallback: one execution = one sample
            key = getattr(sample, "index", None)
        grouped.setdefault(key if key is not None else ("sample", id(sample)), []).append(sample)
    out = []
    for key, members in grouped.items():
        first = members[0]
        metadata = first.metadata if isinstance(getattr(first, "metadata", None), Mapping) else {}
        info = metadata.get("swe") if isinstance(metadata.get("swe"), Mapping) else None
        statuses = [_status_name(getattr(s, "status", None)) for s in members]
        traj = TrajectorySummary(
            key=key,
            group=getattr(first, "group_index", None),
            samples=len(members),
            swe=info is not None,
            data_source=_data_source(metadata),
            language=_language(metadata),
            removed=any(bool(getattr(s, "remove_sample", False)) for s in members),
            aborted="aborted" in statuses,
            truncated="truncated" in statuses,
        )
        rewards = [r for r in (_reward_value(s, reward_key) for s in members) if r is not None]
        traj.reward = statistics.fmean(rewards) if rewards else None
        if info is not None:
            _from_info(traj, info)
        if traj.sampled_tokens is None and not traj.removed:
            masks = [getattr(s, "loss_mask", None) for s in members]
            if all(isinstance(m, list) for m in masks):
                traj.sampled_tokens = sum(sum(m) for m in masks if m is not None)
        out.append(traj)
    return out


def _data_source(metadata: Mapping[str, Any]) -> str | None:
    source = metadata.get("data_source")
    instance = metadata.get("instance")
    if source is None and isinstance(instance, Mapping):
        source = instance.get("data_source")
    return None if source is None else str(source)


def _language(metadata: Mapping[str, Any]) -> str:
    instance = metadata.get("instance")
    if isinstance(instance, Mapping):
        named = instance.get("repo_language") or instance.get("language")
    else:
        named = None
    return str(named or metadata.get("repo_language") or metadata.get("language") or "python").lower()


def trajectories_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[TrajectorySummary]:
    """One trajectory per eval results row. The standalone eval has no groups or aborts; an ``env_error``
    row (the fleet failed) counts as removed, as training removes such a rollout."""
    out = []
    for row in rows:
        traj = TrajectorySummary(
            key=row.get("instance_id"), data_source=row.get("data_source"), language=_language(row)
        )
        infra = row.get("status") == "env_error"
        _from_info(
            traj,
            {
                **row,
                "removed": infra,
                "removed_reason": "env_error" if infra else None,
                "env_error_reason": (row.get("error") or row.get("grade_message")) if infra else None,
                "aborted": False,
            },
        )
        if traj.sampled_tokens is None and isinstance(row.get("completion_tokens"), int):
            traj.sampled_tokens = row["completion_tokens"]
        out.append(traj)
    return out


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
