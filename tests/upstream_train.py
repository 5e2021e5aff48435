"""A rollout's samples through slime's train-data conversion: restated always, the pinned slime's own when here.

`train_data_both` hands the flattened samples of a rollout to ``RolloutManager._convert_samples_to_train_data``
with our reward post-process (and, for comparison, slime's default one) as tests/slime/test_segment_equivalence.py
does: through the restatement in tests/upstream_loss.py (always) and through the pinned slime's own code (the
`upstream_slime` fixture) when its source is here (``SLIME_DIR`` / ``SWE_SLIME_GIT``). Used by the fork-mode
tests (branching groups, executable pivots).
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

import pytest
from test_segment_equivalence import Restated, Upstream, slime_args
from upstream_slime import slime_source

from swe_rl.slime.post_process import post_process_rewards


def train_args(n_samples_per_prompt: int, rollout_batch_size: int = 1) -> Namespace:
    """slime's arguments for grpo with rewards and std normalisation, the restated options."""
    args = slime_args(per_token=False)
    args.n_samples_per_prompt, args.rollout_batch_size = n_samples_per_prompt, rollout_batch_size
    return args


def trainers(request: Any) -> list[tuple[str, Any]]:
    """The restatement, and the pinned slime when its source is here."""
    out: list[tuple[str, Any]] = [("restated", Restated())]
    try:
        out.append(("slime", Upstream(request.getfixturevalue("upstream_slime"))))
    except pytest.skip.Exception:
        assert not slime_source(), "slime's source is here but did not load"
    return out


def train_data_both(
    request: Any, args: Namespace, samples: list[Any], post_process: Any = post_process_rewards
) -> list[tuple[str, dict[str, Any]]]:
    """``(name, train data)`` of the samples for each trainer (`trainers`), ``post_process`` as slime's reward
    post-process (None: slime's default; the restatement then uses tests/upstream_rewards.py)."""
    return [(name, trainer.train_data(args, samples, post_process)) for name, trainer in trainers(request)]
