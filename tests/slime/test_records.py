"""Typed records in ``sample.metadata`` (swe_rl.slime.records) keep the keys saved runs and slime's consumers read,
and the one reward_func (swe_rl.slime.reward) tells the two modes apart by them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from swe_rl.slime.records import PivotRecord, RolloutRecord, StepRecord
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample

ROLLOUT = {
    "removed": False,
    "removed_reason": None,
    "harness": "bash_block",
    "instance_id": "a__b-1",
    "status": "resolved",
    "resolved": True,
    "exit_reason": "submitted",
    "steps": 3,
    "tampered": False,
    "flags": {},
    "tamper_rules": [],
    "prm": {"mean": 0.5, "steps": [{"step": 0, "score": 1.0, "status": "ok"}]},
}


def test_rollout_record_round_trips_its_keys_extras_included():
    record = RolloutRecord.model_validate(ROLLOUT)
    assert record.resolved and record.status == "resolved" and record.prm["mean"] == 0.5
    assert record.to_metadata() == ROLLOUT  # the same keys, nothing added
    sample = Sample(
        metadata={"swe": ROLLOUT, "swe_step": {"turn": 0, "segment": 0, "of": 3, "prm_score": 1.0}}
    )
    assert RolloutRecord.from_sample(sample) == record
    assert StepRecord.from_sample(sample).prm_score == 1.0
    assert PivotRecord.from_sample(sample) is None


def test_one_reward_func_for_both_modes():
    args = SimpleNamespace(swe_prm={"step_coef": 0.5})
    step = Sample(metadata={"swe": ROLLOUT, "swe_step": {"turn": 0, "segment": 0, "of": 3, "prm_score": 1.0}})
    whole = Sample(metadata={"swe": {**ROLLOUT, "resolved": False, "status": "unresolved"}, "swe_segment": 0})
    removed = Sample(metadata={"swe": ROLLOUT}, remove_sample=True)
    pivot = Sample(
        metadata={
            "pivot": {
                "messages": [{"role": "user", "content": "go"}],
                "expected_action": {"tool": "bash", "arguments": {"command": "ls"}},
            },
            "pivot_result": {"removed": False, "score": 1.0, "category": "match"},
        }
    )
    step_r, whole_r, removed_r, pivot_r = asyncio.run(reward_func(args, [step, whole, removed, pivot]))
    assert (step_r["score"], step_r["outcome"], step_r["resolved"]) == (1.5, 1.0, True)
    assert (whole_r["score"], whole_r["outcome"]) == (
        -0.75,
        -1.0,
    )  # the mean step score without a step record
    assert (removed_r["score"], removed_r["removed"]) == (0.0, True) and "outcome" not in removed_r
    assert pivot_r == {"score": 1.0, "acc": 1.0, "category": "match", "removed": False}


def test_a_sample_of_neither_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="metadata\\['swe'\\]"):
        asyncio.run(reward_func(SimpleNamespace(), Sample(metadata={})))
