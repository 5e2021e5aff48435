"""slime's custom reward for both modes: one entry point, dispatching on the sample's record.

    --custom-rm-path swe_rl.slime.reward.reward_func --reward-key score

- a pivot sample (``metadata["pivot"]``): the reward pivot generate stored (`PivotRecord`), or the
  policy's ``sample.response`` scored against the row's expert action when another generate function
  (slime's default) produced it (`swe_rl.rewards.pivot`);
- an end-to-end sample (``metadata["swe"]``, `RolloutRecord`): the outcome of its grade
  (`swe_rl.rewards.outcome`), plus ``prm.step_coef`` × its step's PRM score (a step sample) or the
  mean step score (a whole trajectory) when the judge ran (`swe_rl.rewards.prm_mix`).

The reward is a dict; ``score`` is the scalar slime trains on. Removed samples get ``swe_reward_removed``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from swe_rl.metrics.integrity import is_flagged
from swe_rl.rewards.outcome import OutcomeRewards, outcome_score
from swe_rl.rewards.pivot import PivotRewardConfig, PivotScore, score_turn
from swe_rl.rewards.prm_mix import mixed_reward
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.records import (
    PIVOT_ROW_KEY,
    PivotRecord,
    PivotRow,
    RolloutRecord,
    StepRecord,
)

__all__ = ["pivot_reward", "pivot_row_config", "reward_for", "reward_func", "rollout_reward", "scored_record"]


async def reward_func(args: Any, sample_or_samples: Any, **kwargs: Any) -> Any:
    """slime's custom reward: a dict for one Sample, a list (same nesting) for a list of Samples."""
    config = PluginConfig.from_args(args)

    def one(item: Any) -> Any:
        return [one(x) for x in item] if isinstance(item, list) else reward_for(item, config)

    return one(sample_or_samples)


def reward_for(sample: Any, config: PluginConfig) -> dict[str, Any]:
    """The reward of one sample of either mode."""
    if PIVOT_ROW_KEY in (sample.metadata or {}):
        return _pivot_sample_reward(sample, config)
    record = RolloutRecord.from_sample(sample)
    if record is None:
        raise ValueError("sample has no metadata['swe']: it was not produced by swe_rl.slime.e2e.generate")
    removed = getattr(sample, "remove_sample", False)
    return rollout_reward(record, StepRecord.from_sample(sample), config, remove_sample=removed)


# --------------------------------------------------------------------------- end-to-end


def rollout_reward(
    record: RolloutRecord, step: StepRecord | None, config: PluginConfig, *, remove_sample: bool = False
) -> dict[str, Any]:
    """The reward of an end-to-end sample: outcome, and the PRM step bonus when the judge ran."""
    removed = record.removed or bool(remove_sample)
    resolved = record.resolved and not removed
    rewards = OutcomeRewards(
        resolved=config.reward_resolved,
        unresolved=config.reward_unresolved,
        removed=config.reward_removed,
        flagged=config.flagged_reward,
    )
    score = outcome_score(
        rewards, resolved=resolved, removed=removed, flagged=is_flagged(record.to_metadata())
    )
    out = {
        "score": score,
        "acc": 1.0 if resolved else 0.0,
        "status": record.status,
        "resolved": resolved,
        "removed": removed,
        "exit_reason": record.exit_reason,
    }
    prm = record.prm
    if prm and not removed:
        step_score = step.prm_score if step is not None else prm.get("mean")
        out.update(
            score=mixed_reward(score, step_score, config.prm.step_coef), outcome=score, prm_score=step_score
        )
    return out


# --------------------------------------------------------------------------- pivot


def pivot_row_config(config: PluginConfig, row: PivotRow) -> PivotRewardConfig:
    """The pivot reward settings (``swe_pivot``), with the row's working directory when it has one."""
    return config.pivot.model_copy(update={"workdir": row.workdir}) if row.workdir else config.pivot


def scored_record(score: PivotScore) -> dict[str, Any]:
    """The fields of a `PivotRecord` a `PivotScore` fills."""
    return {"score": score.score, "category": score.category.value, "details": score.details}


def pivot_reward(record: PivotRecord, config: PluginConfig) -> dict[str, Any]:
    """The reward of a scored (or removed) pivot turn."""
    if record.removed:
        return {"score": float(config.reward_removed), "acc": 0.0, "category": "removed", "removed": True}
    return {
        "score": float(record.score or 0.0),
        "acc": 1.0 if record.category == "match" else 0.0,
        "category": record.category,
        "removed": False,
    }


def _pivot_sample_reward(sample: Any, config: PluginConfig) -> dict[str, Any]:
    record = PivotRecord.from_sample(sample)
    if record is None or record.aborted:  # not scored by pivot generate: score the response now
        try:
            row = PivotRow.model_validate(sample.metadata[PIVOT_ROW_KEY])
            scored = score_turn(
                sample.response or "",
                row.expert(),
                pivot_row_config(config, row),
                harness=row.parser,
                tools=row.tools,
            )
            record = PivotRecord(**scored_record(scored))
        except (ValidationError, ValueError, TypeError) as exc:
            record = PivotRecord(removed=True, removed_reason=f"bad_pivot: {exc}")
    if getattr(sample, "remove_sample", False):
        record = record.model_copy(update={"removed": True})
    return pivot_reward(record, config)
