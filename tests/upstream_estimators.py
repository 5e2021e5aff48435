"""slime's advantage estimators at the pin, restated in our words (one rank, no context parallelism).

``compute_advantages(args, data)`` is what ``slime.backends.megatron_utils.loss.compute_advantages_and_returns``
does to ``data`` (``kl``, ``advantages``, ``returns``) for grpo / gspo / cispo, ppo, reinforce_plus_plus and
reinforce_plus_plus_baseline, read from ``slime/backends/megatron_utils/loss.py`` and
``slime/utils/ppo_utils.py`` at the pin: the KL of each response token (``k1``: log-prob minus reference),
grpo's reward broadcast, REINFORCE++'s discounted returns of ``-kl_coef * kl`` on masked tokens plus the reward
on the last masked token (asserting no sample is fully masked), REINFORCE++-baseline's ``reward - kl_coef *
kl``, PPO's GAE over ``-kl_coef * kl`` plus the reward on the last response token, and masked whitening.
``tests/slime/test_estimators.py`` checks it against slime's own function when slime's source is here.
``reinforce_plus_plus_returns`` is the upstream helper restated, for `swe_rl.slime.estimators` to call.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

import torch


def reinforce_plus_plus_returns(
    rewards: torch.Tensor,
    kl: list[torch.Tensor],
    loss_masks: list[torch.Tensor],
    response_lengths: list[int],
    total_lengths: list[int],
    kl_coef: float,
    gamma: float,
) -> list[torch.Tensor]:
    out = []
    for i, (reward, chunk, mask) in enumerate(zip(rewards, kl, loss_masks, strict=True)):
        mask = torch.as_tensor(mask, dtype=torch.float32)
        assert mask.sum().item() > 0, f"Sequence at index {i} is fully masked."
        token_rewards = -kl_coef * chunk * mask
        token_rewards[int(mask.nonzero()[-1])] += reward
        returns, running = torch.zeros_like(token_rewards), torch.tensor(0.0)
        for t in reversed(range(len(token_rewards))):
            running = token_rewards[t] + gamma * running
            returns[t] = running
        out.append(returns)
    return out


def _gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lambd: float) -> torch.Tensor:
    advantages, last = torch.zeros_like(rewards), torch.tensor(0.0)
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        last = rewards[t] + gamma * next_value - values[t] + gamma * lambd * last
        advantages[t] = last
    return advantages


def compute_advantages(args: Namespace, data: dict[str, Any]) -> None:
    log_probs = data["rollout_log_probs"] if args.use_rollout_logprobs else data["log_probs"]
    masks = [torch.as_tensor(m, dtype=torch.float32) for m in data["loss_masks"]]
    if args.kl_coef == 0:
        kl = [torch.zeros_like(x, dtype=torch.float32) for x in log_probs]
    else:
        kl = [lp.float() - ref.float() for lp, ref in zip(log_probs, data["ref_log_probs"], strict=True)]
    data["kl"] = kl
    rewards = [float(r) for r in data["rewards"]]
    estimator = args.advantage_estimator
    if args.custom_advantage_function_path is not None:
        module, _, name = args.custom_advantage_function_path.rpartition(".")
        getattr(__import__(module, fromlist=[name]), name)(args, data)
        advantages, returns = data["advantages"], data["returns"]
    elif estimator in ("grpo", "gspo", "cispo"):
        returns = [torch.ones_like(k) * r for k, r in zip(kl, rewards, strict=True)]
        advantages = list(returns)
    elif estimator == "ppo":
        advantages, returns = [], []
        for r, k, v in zip(rewards, kl, data["values"], strict=True):
            token_rewards = k * -args.kl_coef
            token_rewards[-1] += r
            adv = _gae(token_rewards, v.float(), args.gamma, args.lambd)
            advantages.append(adv)
            returns.append(adv + v.float())
    elif estimator == "reinforce_plus_plus":
        returns = reinforce_plus_plus_returns(
            torch.tensor(rewards),
            kl,
            masks,
            data["response_lengths"],
            data["total_lengths"],
            args.kl_coef,
            args.gamma,
        )
        advantages = list(returns)
    elif estimator == "reinforce_plus_plus_baseline":
        advantages = [torch.ones_like(k) * r - args.kl_coef * k for k, r in zip(kl, rewards, strict=True)]
        returns = advantages
    else:
        raise NotImplementedError(estimator)
    if args.normalize_advantages:
        flat, mask = torch.cat(advantages), torch.cat(masks)
        mean = (flat * mask).sum() / mask.sum()
        var = ((flat - mean) ** 2 * mask).sum() / mask.sum()
        if mask.sum() >= 2:  # Bessel's correction, as distributed_masked_whiten
            var = var * mask.sum() / (mask.sum() - 1)
        flat = (flat - mean) * torch.rsqrt(var + 1e-8)
        advantages = list(torch.split(flat, [len(a) for a in advantages]))
    data["advantages"], data["returns"] = advantages, returns
