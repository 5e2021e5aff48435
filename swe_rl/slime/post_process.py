"""slime's reward post-process hook: per-trajectory group advantages (`swe_rl.rewards.advantages`).

    --custom-reward-post-process-path swe_rl.slime.post_process.post_process_rewards

slime calls ``post_process_rewards(args, samples)`` from ``RolloutManager._post_process_rewards`` with
the flattened rollout and trains on the second list it returns; upstream's own normalisation would
weigh a trajectory by its number of step samples. See docs/advantages.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swe_rl.rewards.advantages import sample_advantages

__all__ = ["post_process_rewards"]


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """slime's ``--custom-reward-post-process-path`` hook: ``(raw_rewards, rewards)`` per sample."""
    return sample_advantages(args, samples)
