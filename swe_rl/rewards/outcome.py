"""The outcome reward of one end-to-end rollout: its grade (resolved or not), removal and integrity flags → a score.

Removed rollouts (infrastructure failures, uncertified instances, ...) get ``removed`` — never a negative
reward, their loss mask is zero anyway; a flagged rollout (monitor flag, tampered tests) gets ``flagged``
instead of its outcome when that is set.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OutcomeRewards", "outcome_score"]


@dataclass(frozen=True)
class OutcomeRewards:
    """The scores of each outcome (the plugin's ``swe_reward_*`` and ``swe_flagged_reward`` settings)."""

    resolved: float = 1.0
    unresolved: float = -1.0
    removed: float = 0.0
    flagged: float | None = None


def outcome_score(rewards: OutcomeRewards, *, resolved: bool, removed: bool, flagged: bool = False) -> float:
    """The score of one rollout; ``resolved`` counts only when the rollout was not removed."""
    if removed:
        return float(rewards.removed)
    if flagged and rewards.flagged is not None:
        return float(rewards.flagged)
    return float(rewards.resolved if resolved else rewards.unresolved)
