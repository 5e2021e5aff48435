"""Which of slime's estimators and corrections are exact under the plugin's samples (docs/advantages.md).

- `check_estimator(args, config, several=True)`: refuses (ValueError naming the flag and the setting that makes it exact)
  what would train something other than the trajectory's objective, or crash, with the plugin's samples:
  a pure function of slime's ``args`` and the plugin config, called by `swe_rl.slime.runtime.check_options`
  at the first rollout and by the launch's dry run.
- `reinforce_plus_plus_returns(args, rollout_data)`: slime's own REINFORCE++ returns
  (``slime.utils.ppo_utils.get_reinforce_plus_plus_returns`` at the pin) for every sample that trains a
  token, zeros for a removed one. Pass it as ``--custom-advantage-function-path`` with
  ``--advantage-estimator reinforce_plus_plus``.

Why the last one exists: slime zeroes the loss mask of every ``remove_sample`` sample
(``RolloutManager._convert_samples_to_train_data``), and upstream's REINFORCE++ asserts that no sample is
fully masked ("Sequence at index i is fully masked"), so one fleet failure in a batch would stop the run.
A removed rollout trains nothing under every other estimator; with this function it trains nothing under
REINFORCE++ either, and every other sample gets exactly upstream's returns (they are per sample).

Exact means: every sampled token gets the advantage (and the loss term) it would get if its trajectory were
one slime sample. A trajectory is several samples when ``swe_samples: turn`` (and PRM runs), or
``swe_samples: segment`` with context management (one sample per context segment).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swe_rl.slime.config import PluginConfig

__all__ = [
    "REINFORCE_PLUS_PLUS_PATH",
    "check_estimator",
    "reinforce_plus_plus_returns",
    "split_mode",
]

REINFORCE_PLUS_PLUS_PATH = "swe_rl.slime.estimators.reinforce_plus_plus_returns"
ONE_SAMPLE = (
    "make every trajectory one sample: swe_context_management: false (with swe_samples: segment; an episode "
    "that outgrows the context window then ends truncated) or swe_samples: last"
)


def split_mode(config: PluginConfig) -> str | None:
    """``turn`` or ``segment`` when one trajectory may be several samples, else None (one sample each)."""
    mode = "turn" if config.samples == "segment" and config.prm.enable else config.samples
    if mode == "turn" or (mode == "segment" and config.context_management):
        return mode
    return None


def check_estimator(args: Any, config: PluginConfig, *, several: bool = True) -> None:
    """Raise ValueError for an estimator or correction that is neither exact nor safe with these samples
    (``several``: a rollout may give several samples; False for pivot rows, one turn each)."""
    estimator = getattr(args, "advantage_estimator", None)
    custom = getattr(args, "custom_advantage_function_path", None)
    if estimator == "reinforce_plus_plus" and custom is None:
        raise ValueError(
            "--advantage-estimator reinforce_plus_plus: slime zeroes the loss mask of a removed rollout "
            "(remove_sample: fleet failure, missing image, timeout) and its REINFORCE++ returns then stop the "
            "run ('Sequence at index i is fully masked'). Pass --custom-advantage-function-path "
            f"{REINFORCE_PLUS_PLUS_PATH} (slime's own returns, zeros for removed samples; docs/advantages.md)."
        )
    if getattr(args, "use_opd", False) and getattr(args, "opd_type", None) == "sglang":
        raise ValueError(
            "--use-opd --opd-type sglang: the teacher's log-probs come from slime's on-policy-distillation "
            "reward function and reward post-process, which replace the SWE reward (grading) and the "
            "trajectory post-process. Use --opd-type megatron (the teacher scores each sample's own tokens in "
            "training: per token, exact with segment samples)."
        )
    if custom == REINFORCE_PLUS_PLUS_PATH and estimator != "reinforce_plus_plus":
        raise ValueError(
            f"--custom-advantage-function-path {custom} computes REINFORCE++ returns, but "
            f"--advantage-estimator is {estimator}: pass --advantage-estimator reinforce_plus_plus, or drop the path."
        )
    mode = split_mode(config) if several else None
    if custom is None or custom == REINFORCE_PLUS_PLUS_PATH:  # the user's own estimator is theirs to judge
        _check_returns(args, estimator, mode)
    _check_mis(args, mode)


def _check_returns(args: Any, estimator: str | None, mode: str | None) -> None:
    """PPO and REINFORCE++ sum rewards and KL penalties over the tokens after each one, within its sample:
    exact under split samples only when that sum is the trajectory's reward on every token."""
    if mode is None or estimator not in ("reinforce_plus_plus", "ppo"):
        return
    per = "policy turn" if mode == "turn" else "context segment"
    where = f"swe_samples: {mode} gives one sample per {per}"
    settings = {"--kl-coef": (float(getattr(args, "kl_coef", 0.0) or 0.0), 0.0)}
    settings["--gamma"] = (float(getattr(args, "gamma", 1.0)), 1.0)
    if estimator == "ppo":
        settings["--lambd"] = (float(getattr(args, "lambd", 1.0)), 1.0)
    bad = [f"{flag} {value:g}" for flag, (value, exact) in settings.items() if value != exact]
    if bad:
        keep = " ".join(f"{flag} {exact:g}" for flag, (_, exact) in settings.items())
        raise ValueError(
            f"--advantage-estimator {estimator} with {' '.join(bad)}: each token's return sums the "
            f"(discounted) rewards and KL penalties after it within its slime sample, but {where}, so "
            "the sum would stop at the sample's end instead of the trajectory's. Use "
            f"{keep} (every token's return is then the trajectory's reward: exact), the KL as a loss "
            "(--use-kl-loss, per token) or --advantage-estimator reinforce_plus_plus_baseline "
            f"(its KL penalty is per token), or {ONE_SAMPLE}. See docs/advantages.md."
        )


def _check_mis(args: Any, mode: str | None) -> None:
    """slime's importance-sampling example (examples/train_infer_mismatch_helper/mis.py, given with
    ``--custom-tis-function-path``, its keys from mis.yaml): sequence-level or geometric weights, sequence
    batch normalisation and the per-token veto all act on a whole slime sample."""
    path = getattr(args, "custom_tis_function_path", None) or ""
    if mode is None or "compute_mis_weights" not in path:
        return
    use_tis, use_rs = bool(getattr(args, "use_tis", False)), bool(getattr(args, "use_rs", False))
    bad = []
    if use_tis and getattr(args, "tis_level", "token") != "token":
        bad.append(f"tis_level: {args.tis_level}")
    if use_rs and getattr(args, "rs_level", "token") != "token":
        bad.append(f"rs_level: {args.rs_level}")
    if use_rs and getattr(args, "rs_veto_threshold", None) is not None:
        bad.append(f"rs_veto_threshold: {args.rs_veto_threshold}")
    if bad:
        raise ValueError(
            f"--custom-tis-function-path {path} with {', '.join(bad)}: slime's MIS example weighs or rejects "
            f"a whole slime sample, but swe_samples: {mode} cuts a trajectory into several, so the weight "
            "would be a segment's or a turn's. Use tis_level: token, rs_level: token and "
            f"rs_veto_threshold: null (per token: exact), or {ONE_SAMPLE}. See docs/advantages.md."
        )


def reinforce_plus_plus_returns(args: Any, rollout_data: dict[str, Any]) -> None:
    """``--custom-advantage-function-path`` for ``--advantage-estimator reinforce_plus_plus``: upstream's
    returns for every sample with a trained token, zeros for a fully masked (removed) one. Sets
    ``advantages`` and ``returns`` as slime's built-in branch does; slime's OPD and ``--normalize-advantages``
    still run after it (a zero mask keeps a removed sample out of the whitening statistics)."""
    import torch
    from slime.utils.ppo_utils import get_reinforce_plus_plus_returns

    kl = rollout_data["kl"]
    masks = rollout_data["loss_masks"]
    live = [i for i, mask in enumerate(masks) if float(torch.as_tensor(mask).sum()) > 0]
    returns = [torch.zeros_like(chunk) for chunk in kl]
    if live:
        rewards = rollout_data["rewards"]
        got = get_reinforce_plus_plus_returns(
            rewards=torch.tensor([float(rewards[i]) for i in live], dtype=torch.float32, device=kl[0].device),
            kl=[kl[i] for i in live],
            loss_masks=[masks[i] for i in live],
            response_lengths=[rollout_data["response_lengths"][i] for i in live],
            total_lengths=[rollout_data["total_lengths"][i] for i in live],
            kl_coef=args.kl_coef,
            gamma=args.gamma,
        )
        for i, chunk in zip(live, got, strict=True):
            returns[i] = chunk
    rollout_data["advantages"] = list(returns)
    rollout_data["returns"] = returns
