"""Upstream slime's default reward post-process and loss denominators, restated in our own words.

`upstream_post_process` restates what ``RolloutManager._post_process_rewards`` does at
the pinned commit (third_party/slime.md) after ``_get_rollout_data`` flattened the rollout (while the first
item is a list, chain one level): take each sample's reward value; for grpo / gspo / cispo /
reinforce_plus_plus_baseline with rewards normalisation, view the flat rewards as rows of
``n_samples_per_prompt`` when there are exactly ``n_samples_per_prompt × rollout_batch_size`` of them, else as
one row of everything; subtract the row mean; for grpo / gspo / cispo with std normalisation divide by the
row's unbiased std + 1e-6. `upstream_mask_sums` restates ``_convert_samples_to_train_data``'s per-rollout
loss denominators (sum of the loss masks of every sample sharing a rollout id; a missing id gets a fresh one).
Shared by tests/rewards/test_advantages.py and tests/slime/test_training_signal.py.
"""

from __future__ import annotations

import itertools
import math


def flatten(data: list) -> list:
    while isinstance(data[0], list):
        data = list(itertools.chain.from_iterable(data))
    return data


def _std(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")


def upstream_post_process(args, samples: list) -> tuple[list[float], list[float]]:
    raw = [s.get_reward_value(args) for s in samples]
    if (
        args.advantage_estimator not in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
        or not args.rewards_normalization
    ):
        return raw, raw
    n = args.n_samples_per_prompt
    rows = (
        [raw[i : i + n] for i in range(0, len(raw), n)] if len(raw) == n * args.rollout_batch_size else [raw]
    )
    out = []
    for row in rows:
        mean = sum(row) / len(row)
        centred = [r - mean for r in row]
        if args.advantage_estimator in ("grpo", "gspo", "cispo") and args.grpo_std_normalization:
            std = _std(centred)
            centred = [c / (std + 1e-6) for c in centred]
        out += centred
    return raw, out


def upstream_rollout_ids(samples: list) -> list[int]:
    """Each sample's rollout id; a missing one gets the smallest id no sample holds yet."""
    ids = [s.rollout_id for s in samples]
    taken, fresh = {i for i in ids if i is not None}, 0
    for k, rid in enumerate(ids):
        if rid is None:
            while fresh in taken:
                fresh += 1
            ids[k] = fresh
            taken.add(fresh)
    return ids


def upstream_loss_masks(samples: list) -> list[list[int]]:
    """Each sample's loss mask: all ones when it has none, all zeros when it is removed."""
    return [
        [0] * s.response_length
        if s.remove_sample
        else ([1] * s.response_length if s.loss_mask is None else s.loss_mask)
        for s in samples
    ]


def upstream_mask_sums(samples: list) -> list[int]:
    ids = upstream_rollout_ids(samples)
    masks = upstream_loss_masks(samples)
    totals: dict[int, int] = {}
    for rid, m in zip(ids, masks):
        totals[rid] = totals.get(rid, 0) + sum(m)
    return [totals[rid] for rid in ids]
