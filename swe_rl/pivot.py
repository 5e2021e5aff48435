"""Deprecated: the old slime entry points of pivot mode; use `swe_rl.slime.pivot` and `swe_rl.slime.reward`.

    --custom-generate-function-path swe_rl.slime.pivot.generate
    --custom-rm-path swe_rl.slime.reward.reward_func

Kept so that existing launch commands keep working; nothing in swe_rl imports it.
"""

import warnings

from swe_rl.slime.pivot import generate
from swe_rl.slime.reward import reward_func

__all__ = ["generate", "reward_func"]

warnings.warn(
    "swe_rl.pivot is deprecated: use swe_rl.slime.pivot.generate and swe_rl.slime.reward.reward_func",
    DeprecationWarning,
    stacklevel=2,
)
