"""Upstream slime's train-data conversion, grpo advantages and policy loss, restated in our own words.

What slime does at the pinned commit (``third_party/pins.env``) with a flat list of samples on one rank
(no tensor / context / pipeline parallelism), for the options the segment equivalence test uses
(grpo, no KL, rollout log-probs as the old policy, no TIS, no advantage whitening, rollout temperature 1):

- `train_data` restates ``RolloutManager._convert_samples_to_train_data`` (``slime/ray/rollout.py``) and
  ``tensorize_rollout_data_for_training`` (``slime/observability/rollout_data_utils.py``): the reward
  post-process (ours, or slime's default as restated in tests/upstream_rewards.py) gives one reward per sample;
  a missing rollout id gets the smallest free one; a missing loss mask is all ones, a removed sample's all
  zeros; ``rollout_mask_sums[i]`` is the sum of the loss masks of every sample sharing sample i's rollout id.
- `grpo_advantages` restates ``compute_advantages_and_returns`` with grpo (``get_grpo_returns`` in
  ``slime/utils/ppo_utils.py``): each sample's one reward spread over every response token (with
  ``kl_coef`` 0 the KL is zeros shaped like the rollout log-probs).
- `response_log_probs` restates ``get_log_probs_and_entropy`` (``slime/backends/megatron_utils/loss.py``) on
  packed logits ``[1, T, V]``: a sample of total length L and response length R ending at packed offset e has
  its response scored by the logits at ``[e - R - 1, e - 1)`` against its last R ids; entropy of the same rows.
- `sum_of_sample_mean` restates ``get_sum_of_sample_mean`` (``slime/backends/megatron_utils/cp_utils.py``):
  per sample, the masked sum over its response divided by its (per-rollout) denominator, clamped to >= 1,
  summed over samples; with ``--calculate-per-token-loss`` the masked sum alone.
- `loss_function` restates ``loss_function`` + ``policy_loss_function`` + ``compute_policy_loss``
  (PPO clip, ``eps_clip`` / ``eps_clip_high``, dual clip with ``eps_clip_c``): ratio ``exp(new - old)``,
  per-token loss ``max(-ratio·A, -clip(ratio)·A)`` reduced as above, minus ``entropy_coef`` × reduced
  entropy; without per-token loss scaled by ``num_microbatches / step_global_batch_size``; the normalizer is
  the sum over samples of ``max(mask sum, 1)`` with per-token loss, else 1.

Options outside that path raise `NotImplementedError` rather than being guessed. tests/slime/
test_segment_equivalence.py runs its equivalence through this restatement and, when slime's source is here,
through slime itself, and checks both give the same numbers on the same input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from upstream_rewards import upstream_loss_masks, upstream_post_process, upstream_rollout_ids

RESTATED = {
    "advantage_estimator": ("grpo",),
    "kl_coef": (0.0,),
    "use_rollout_logprobs": (True,),
    "custom_advantage_function_path": (None,),
    "use_opd": (False,),
    "normalize_advantages": (False,),
    "loss_type": ("policy_loss",),
    "use_opsm": (False,),
    "get_mismatch_metrics": (False,),
    "use_tis": (False,),
    "use_kl_loss": (False,),
    "custom_pg_loss_reducer_function_path": (None,),
    "rollout_top_p": (1.0,),
    "rollout_temperature": (1.0,),
    "allgather_cp": (False,),
}
"""The options this restatement covers, with the values it covers."""


def check_restated(args: Any) -> None:
    for name, values in RESTATED.items():
        if getattr(args, name) not in values:
            raise NotImplementedError(f"not restated: {name}={getattr(args, name)!r}")


def train_data(args: Any, samples: list, reward_post_process: Callable | None = None) -> dict[str, Any]:
    """The keys of slime's train data the loss reads, as tensors (``total_lengths`` added as the actor does)."""
    check_restated(args)
    _, rewards = (reward_post_process or upstream_post_process)(args, samples)
    assert len(rewards) == len(samples)
    ids = upstream_rollout_ids(samples)
    masks = upstream_loss_masks(samples)
    for s, m in zip(samples, masks):
        assert len(m) == s.response_length, (
            f"loss mask length {len(m)} != response length {s.response_length}"
        )
    totals: dict[int, int] = {}
    for rid, m in zip(ids, masks):
        totals[rid] = totals.get(rid, 0) + sum(m)
    return {
        "tokens": [torch.tensor(s.tokens, dtype=torch.long) for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "rewards": list(rewards),
        "loss_masks": [torch.tensor(m, dtype=torch.int) for m in masks],
        "rollout_ids": ids,
        "rollout_mask_sums": torch.tensor([totals[rid] for rid in ids], dtype=torch.float32),
        "rollout_log_probs": [torch.tensor(s.rollout_log_probs, dtype=torch.float32) for s in samples],
        "total_lengths": [len(s.tokens) for s in samples],
    }


def grpo_advantages(args: Any, data: dict[str, Any]) -> None:
    """Adds ``advantages`` (and the same ``returns``): each sample's reward on every response token."""
    check_restated(args)
    advantages = [
        torch.full_like(lp, float(torch.tensor(r, dtype=torch.float32)))
        for lp, r in zip(data["rollout_log_probs"], data["rewards"])
    ]
    data["advantages"] = advantages
    data["returns"] = list(advantages)


def response_log_probs(
    logits: torch.Tensor, tokens: list[torch.Tensor], total_lengths: list[int], response_lengths: list[int]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per sample, the log-prob of each response id and the entropy of the distribution it was drawn from."""
    assert logits.dtype == torch.float32 and logits.dim() == 3 and logits.size(0) == 1
    rows = logits[0]
    log_probs, entropies = [], []
    end = 0
    for ids, total, response in zip(tokens, total_lengths, response_lengths):
        end += total
        logp = torch.log_softmax(rows[end - response - 1 : end - 1], dim=-1)
        log_probs.append(logp.gather(-1, ids[-response:].unsqueeze(-1)).squeeze(-1))
        entropies.append(-(logp.exp() * logp).sum(-1))
    return log_probs, entropies


def sum_of_sample_mean(
    response_lengths: list[int], loss_masks: list[torch.Tensor], denominators: torch.Tensor, per_token: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    def reduce(x: torch.Tensor) -> torch.Tensor:
        parts = x.split(response_lengths, dim=0)
        if per_token:
            return sum((p * m).sum() for p, m in zip(parts, loss_masks))  # type: ignore[return-value]
        return sum(  # type: ignore[return-value]
            (p * m).sum() / torch.clamp_min(d, 1) for p, m, d in zip(parts, loss_masks, denominators)
        )

    return reduce


def loss_function(
    args: Any, batch: dict[str, Any], num_microbatches: int, step_global_batch_size: int, logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, normalizer)`` of one micro-batch; the trainer steps on ``loss / normalizer``."""
    check_restated(args)
    reduce = sum_of_sample_mean(
        batch["response_lengths"],
        batch["loss_masks"],
        batch["rollout_mask_sums"],
        args.calculate_per_token_loss,
    )
    log_probs, entropies = response_log_probs(
        logits, batch["unconcat_tokens"], batch["total_lengths"], batch["response_lengths"]
    )
    new = torch.cat(log_probs)
    old = torch.cat(batch["rollout_log_probs"])
    advantages = torch.cat(batch["advantages"])
    ratio = torch.exp(new - old)
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1 - args.eps_clip, 1 + args.eps_clip_high) * advantages
    pg = torch.maximum(unclipped, clipped)
    if args.eps_clip_c is not None:
        pg = torch.where(advantages < 0, torch.minimum(-args.eps_clip_c * advantages, pg), pg)
    loss = reduce(pg) - args.entropy_coef * reduce(torch.cat(entropies))
    if new.numel() == 0:
        loss = loss + 0 * logits.sum()
    if args.calculate_per_token_loss:
        normalizer = sum(torch.clamp_min(m.sum(), 1) for m in batch["loss_masks"])
        return loss, normalizer  # type: ignore[return-value]
    return loss * num_microbatches / step_global_batch_size, torch.tensor(1)
