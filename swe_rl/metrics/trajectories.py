"""A batch read as trajectories: one `TrajectorySummary` per played episode, from either source.

A trajectory is what the dashboard counts, whatever the number of samples it was handed to slime as.
Two sources give the same records, so training and the standalone eval show the same figures
(`swe_rl.metrics.rollout.figures`) under the same names:

- `trajectories_from_samples` — slime samples made by `swe_rl.slime.e2e.generate`, grouped by
  ``rollout_id`` (else ``index``): a trajectory is one sample per context segment (or per policy turn);
- `trajectories_from_rows` — the rows of an eval run's ``results.jsonl`` (`eval/eval_swe.py`).

Metadata is read defensively: a field no sample or row carries stays None, so its figure is left
out rather than reported as 0. `rollout` re-exports these names.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from swe_rl.metrics.env_errors import env_error_kind

__all__ = [
    "CERTIFICATION_REASONS",
    "TrajectorySummary",
    "trajectories_from_rows",
    "trajectories_from_samples",
]

CERTIFICATION_REASONS = ("uncertified", "not_certified", "certification")
"""Removed-reason categories that mean "skipped: the instance is not certified"."""


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
