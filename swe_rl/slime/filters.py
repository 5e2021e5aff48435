"""Dynamic sampling filters for slime that judge trajectories, not step samples.

    --dynamic-sampling-filter-path swe_rl.slime.filters.check_trajectory_reward_nonzero_std
    --dynamic-sampling-filter-path swe_rl.slime.filters.check_trajectory_reward_nonzero_std_with_fallback

slime calls the filter with one prompt group as it came back from ``generate_and_rm_group``: a list
of n items, each a Sample or (``swe_samples: segment | turn``) a list of Samples (per segment or step). Upstream's
``check_reward_nonzero_std`` reads a reward off each item, so it breaks on lists and, flattened,
would count a long trajectory many times. These filters take one reward per trajectory (the same
reading as `swe_rl.rewards.advantages`: the outcome, removed and aborted trajectories left out) and keep
the group when at least two valid trajectories remain and their rewards differ — the only groups
whose per-trajectory GRPO advantages are not all zero. The ``_with_fallback`` variant keeps a
rejected group when dropping it would leave too few to fill the batch (upstream's option of the
same name). Both return slime's ``DynamicFilterOutput`` (a same-shaped stand-in without slime).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from swe_rl.rewards.advantages import trajectories

__all__ = [
    "check_trajectory_reward_nonzero_std",
    "check_trajectory_reward_nonzero_std_with_fallback",
    "trajectory_rewards",
]


@dataclass
class _FilterOutput:
    """Stand-in for ``slime.rollout.filter_hub.base_types.DynamicFilterOutput`` when slime is absent."""

    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def _output_class() -> type:
    try:
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    except ImportError:
        return _FilterOutput
    return DynamicFilterOutput


def _flatten(group: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in group:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def trajectory_rewards(args: Any, group: list[Any]) -> list[float]:
    """One reward per valid trajectory of the group (removed and aborted ones left out)."""
    return [t.reward for t in trajectories(args, _flatten(group)) if t.excluded is None]


def check_trajectory_reward_nonzero_std(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """Keep the group when its valid trajectories' rewards are not all equal (and there are two or more)."""
    rewards = trajectory_rewards(args, samples)
    cls = _output_class()
    if len(rewards) < 2:
        return cls(keep=False, reason=f"valid_trajectories_{len(rewards)}")
    mean = math.fsum(rewards) / len(rewards)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    keep = std > 1e-6
    return cls(keep=keep, reason=None if keep else f"zero_std_{round(rewards[0], 1)}")


def check_trajectory_reward_nonzero_std_with_fallback(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """`check_trajectory_reward_nonzero_std`, but a rejected group is kept when the batch could not be filled."""
    output = check_trajectory_reward_nonzero_std(args, samples, **kwargs)
    output.keep_when_insufficient = True
    return output
