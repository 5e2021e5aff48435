"""Per-trajectory group advantages: the pure math behind slime's reward post-process hook.

`swe_rl.slime.post_process.post_process_rewards` (``--custom-reward-post-process-path``) calls
`sample_advantages` with the flattened rollout slime hands it (every sample — one per context segment,
or per agent step — of every trajectory of every prompt group); slime trains on the second list. Upstream's own normalisation reshapes the flat rewards
into rows of ``--n-samples-per-prompt`` only when the sample count is exactly
``n_samples_per_prompt × rollout_batch_size``; with several samples per trajectory the count
differs and it normalises over the whole batch, trajectories weighted by their number of samples.
Here instead:

1. a **trajectory** is the samples sharing ``rollout_id`` (else ``index``) within a prompt
   group (``group_index``); its reward is the outcome of its last sample (``reward["outcome"]``
   when the PRM mixed a step score in, else the reward value);
2. removed (``remove_sample``, ``reward["removed"]``) and aborted trajectories are left out of
   the statistics and get advantage 0 on every sample;
3. for GRPO / GSPO / CISPO / REINFORCE++-baseline with ``--rewards-normalization`` (slime's
   default) the rest is normalised **within its group over trajectories**: ``r − mean``, divided by
   ``std + 1e-6`` (unbiased std, as torch) for GRPO / GSPO / CISPO with ``--grpo-std-normalization``;
   a group of one valid trajectory gets 0; other estimators keep the raw reward, as upstream;
4. the trajectory's value is broadcast to each of its samples, and each (per-turn) sample's PRM step
   bonus (its reward value minus its outcome, i.e. ``step_coef × step score``) is added after
   normalisation.

`sample_advantages` returns ``(raw_rewards, rewards)``, one float per sample in slime's order. Pure
Python, no slime import; samples only need slime's field names and ``args`` its flag names. See docs/advantages.md for a worked example.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GROUP_ESTIMATORS", "STD_ESTIMATORS", "TrajectorySamples", "sample_advantages", "trajectories"]

log = logging.getLogger(__name__)
GROUP_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
"""Estimators upstream normalises per prompt group (``--rewards-normalization``)."""
STD_ESTIMATORS = ("grpo", "gspo", "cispo")
"""Estimators that also divide by the group's std (``--grpo-std-normalization``)."""
EPS = 1e-6


@dataclass
class TrajectorySamples:
    """The step samples of one rollout, by position in slime's flat list."""

    group: Any
    key: Any
    positions: list[int] = field(default_factory=list)
    reward: float = 0.0
    excluded: str | None = None
    """Why the trajectory is outside the statistics (removed / aborted), None when it counts."""


def _value(args: Any, sample: Any) -> float | None:
    """The scalar slime trains on (``--reward-key`` of a dict reward); None when there is none."""
    reward = sample.reward
    if reward is None:
        return None
    key = getattr(args, "reward_key", None)
    if isinstance(reward, dict):
        value = reward.get(key) if key else reward.get("score")
        return None if value is None else float(value)
    return float(reward)


def _outcome(args: Any, sample: Any) -> float | None:
    """The trajectory-level part of a sample's reward (``outcome`` when a PRM step score was mixed in)."""
    reward = sample.reward
    if isinstance(reward, dict) and reward.get("outcome") is not None:
        return float(reward["outcome"])
    return _value(args, sample)


def _exclusion(args: Any, sample: Any) -> str | None:
    if getattr(sample, "remove_sample", False) or (
        isinstance(sample.reward, dict) and sample.reward.get("removed")
    ):
        return "removed"
    status = getattr(getattr(sample, "status", None), "value", None)
    if status == "aborted":
        return "aborted"
    if _value(args, sample) is None:
        return "no_reward"
    return None


def trajectories(args: Any, samples: Sequence[Any]) -> list[TrajectorySamples]:
    """Samples grouped into trajectories, in order of first appearance."""
    n = max(1, int(getattr(args, "n_samples_per_prompt", 1) or 1))
    found: dict[tuple[Any, Any], TrajectorySamples] = {}
    for pos, sample in enumerate(samples):
        rid = sample.rollout_id if sample.rollout_id is not None else sample.index
        key = rid if rid is not None else ("position", pos)
        group = sample.group_index
        if group is None:  # no group annotation: consecutive runs of n trajectories, as upstream's rows
            group = ("row", len(found) // n) if (None, key) not in found else found[(None, key)].group
            traj = found.setdefault((None, key), TrajectorySamples(group=group, key=key))
        else:
            traj = found.setdefault((group, key), TrajectorySamples(group=group, key=key))
        traj.positions.append(pos)
    for traj in found.values():
        last = samples[traj.positions[-1]]
        reasons = [r for r in (_exclusion(args, samples[p]) for p in traj.positions) if r]
        traj.excluded = reasons[0] if reasons else None
        traj.reward = 0.0 if traj.excluded else float(_outcome(args, last))  # type: ignore[arg-type]
    return list(found.values())


def _normalised(args: Any, trajs: list[TrajectorySamples]) -> dict[int, float]:
    """Advantage of each trajectory (by id()), normalised within its group over valid trajectories."""
    estimator = getattr(args, "advantage_estimator", "grpo")
    normalise = estimator in GROUP_ESTIMATORS and getattr(args, "rewards_normalization", True)
    use_std = estimator in STD_ESTIMATORS and getattr(args, "grpo_std_normalization", True)
    groups: dict[Any, list[TrajectorySamples]] = {}
    for traj in trajs:
        if traj.excluded is None:
            groups.setdefault(traj.group, []).append(traj)
    out: dict[int, float] = {}
    for members in groups.values():
        rewards = [t.reward for t in members]
        if not normalise:
            out.update({id(t): t.reward for t in members})
            continue
        mean = math.fsum(rewards) / len(rewards)
        std = (
            math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
            if len(rewards) > 1
            else 0.0
        )
        for t in members:
            adv = t.reward - mean
            out[id(t)] = adv / (std + EPS) if use_std else adv
    return out


def sample_advantages(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """``(raw_rewards, rewards)`` per sample: trajectory advantages broadcast to step samples, plus step bonuses."""
    samples = list(samples)
    raw = [_value(args, s) for s in samples]
    trajs = trajectories(args, samples)
    advantages = _normalised(args, trajs)
    rewards = [0.0] * len(samples)
    for traj in trajs:
        if traj.excluded is not None:
            continue
        base = advantages[id(traj)]
        for pos in traj.positions:
            bonus = (raw[pos] or 0.0) - (_outcome(args, samples[pos]) or 0.0)  # PRM step score × coef, else 0
            rewards[pos] = base + bonus
    excluded = [t for t in trajs if t.excluded]
    log.info(
        "reward post-process: %d samples, %d trajectories in %d groups, %d excluded (%s)",
        len(samples),
        len(trajs),
        len({t.group for t in trajs}),
        len(excluded),
        ", ".join(sorted({t.excluded for t in excluded if t.excluded})) or "none",
    )
    return [0.0 if r is None else r for r in raw], rewards
