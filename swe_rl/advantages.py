"""Deprecated: the old reward post-process entry point; use `swe_rl.slime.post_process`.

    --custom-reward-post-process-path swe_rl.slime.post_process.post_process_rewards

Kept so that existing launch commands keep working; nothing in swe_rl imports it.
"""

import warnings

from swe_rl.slime.post_process import post_process_rewards

__all__ = ["post_process_rewards"]

warnings.warn(
    "swe_rl.advantages is deprecated: use swe_rl.slime.post_process.post_process_rewards",
    DeprecationWarning,
    stacklevel=2,
)
