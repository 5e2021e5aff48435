"""Deprecated: the old slime entry points of end-to-end mode; use `swe_rl.slime.e2e` and `swe_rl.slime.reward`.

    --custom-generate-function-path swe_rl.slime.e2e.generate
    --custom-rm-path swe_rl.slime.reward.reward_func

Kept so that existing launch commands keep working; nothing in swe_rl imports it.
"""

import warnings

from swe_rl.slime.e2e import generate
from swe_rl.slime.reward import reward_func

__all__ = ["generate", "reward_func"]

warnings.warn(
    "swe_rl.slime_plugin is deprecated: use swe_rl.slime.e2e.generate and swe_rl.slime.reward.reward_func",
    DeprecationWarning,
    stacklevel=2,
)
