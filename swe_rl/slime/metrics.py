"""slime's rollout log hooks: the SWE dashboard figures (`swe_rl.metrics.rollout`) every rollout.

    --custom-rollout-log-function-path swe_rl.slime.metrics.log_rollout_data
    --custom-eval-rollout-log-function-path swe_rl.slime.metrics.log_eval_rollout_data

slime calls the train hook once per rollout step with the flattened batch (one sample per policy
turn with dynamic history) and the eval hook after each evaluation with ``{dataset: {"rewards",
"truncated", "samples"}}``. Both log through slime's own backend helper (wandb and/or tensorboard,
whatever the run turned on) under ``rollout/swe/<figure>`` on the ``rollout/step`` axis and
``eval/<dataset>/swe/<figure>`` on ``eval/step``, with slime's step of that rollout, then return
False so slime's default logging still runs. A failure here is logged, never raised: a dashboard
bug must not stop a training run. slime is imported lazily; without it the figures go to the log only.
"""

from __future__ import annotations

import logging
from typing import Any

from swe_rl.metrics.rollout import figures, trajectories_from_samples

__all__ = ["eval_metrics", "log_eval_rollout_data", "log_rollout_data", "rollout_metrics"]

log = logging.getLogger(__name__)

TRAIN_PREFIX, TRAIN_STEP = "rollout/swe/", "rollout/step"
EVAL_PREFIX, EVAL_STEP = "eval/{name}/swe/", "eval/step"


def rollout_metrics(args: Any, samples: list[Any]) -> dict[str, float]:
    """The figures of one training batch, keys as logged (without the step)."""
    trajectories = trajectories_from_samples(samples, getattr(args, "reward_key", None))
    return {TRAIN_PREFIX + k: v for k, v in figures(trajectories).items()}


def eval_metrics(args: Any, data: dict[str, Any]) -> dict[str, float]:
    """The figures of every eval dataset that handed its samples back, keys as logged."""
    out: dict[str, float] = {}
    reward_key = getattr(args, "eval_reward_key", None) or getattr(args, "reward_key", None)
    for name, result in (data or {}).items():
        samples = result.get("samples") if isinstance(result, dict) else None
        if samples:
            prefix = EVAL_PREFIX.format(name=name)
            out.update(
                {prefix + k: v for k, v in figures(trajectories_from_samples(samples, reward_key)).items()}
            )
    return out


def log_rollout_data(
    rollout_id: int, args: Any, samples: list[Any], rollout_extra_metrics: Any, rollout_time: float
) -> bool:
    """slime's custom rollout log function: log the SWE figures; False = slime's default logging runs too."""
    try:
        _emit(args, rollout_id, rollout_metrics(args, samples), TRAIN_STEP)
    except Exception:
        log.exception("SWE rollout metrics of rollout %s failed", rollout_id)
    return False


def log_eval_rollout_data(rollout_id: int, args: Any, data: dict[str, Any], extra_metrics: Any) -> bool:
    """slime's custom eval rollout log function: log the SWE figures per eval dataset; returns False."""
    try:
        metrics = eval_metrics(args, data)
        if metrics:
            _emit(args, rollout_id, metrics, EVAL_STEP)
    except Exception:
        log.exception("SWE eval metrics of rollout %s failed", rollout_id)
    return False


def _emit(args: Any, rollout_id: int, metrics: dict[str, float], step_key: str) -> None:
    try:
        from slime.observability import logging_utils
        from slime.observability.metric_utils import compute_rollout_step
    except ImportError:
        log.info(
            "SWE metrics of rollout %s (slime not importable, not sent to a tracker): %s", rollout_id, metrics
        )
        return
    step = compute_rollout_step(args, rollout_id)
    log.info("SWE metrics of rollout %s (step %s): %s", rollout_id, step, metrics)
    logging_utils.log(args, {**metrics, step_key: step}, step_key=step_key)
