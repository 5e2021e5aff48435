"""Pieces of the fork modes without a fleet: settings, one trunk per group, the trunk's mask
(swe_rl/slime/branching.py, swe_rl/slime/fork_mode.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from swe_rl.slime.branching import BranchSettings, Trunks, drop_trunk_turns, mask_trunk
from swe_rl.slime.fork_mode import RetrySettings
from swe_rl.slime.samples import STEP_KEY
from swe_rl.tokens.trajectory import TokenTrajectory


def test_settings_from_args():
    assert BranchSettings.from_args(SimpleNamespace()) == BranchSettings(0, 1)
    assert BranchSettings.from_args(SimpleNamespace(swe_branch_at_step=3, n_samples_per_prompt=8)) == (
        BranchSettings(3, 8)
    )
    assert RetrySettings.from_args(SimpleNamespace(swe_retry_infra_failures=2)) == RetrySettings(2, 1)
    with pytest.raises(ValueError):
        BranchSettings.from_args(SimpleNamespace(swe_branch_at_step=-1))
    with pytest.raises(ValueError):
        RetrySettings.from_args(SimpleNamespace(swe_retry_infra_failures=1, swe_checkpoint_every=-2))


async def test_one_trunk_per_group():
    trunks, played = Trunks(), []

    async def play() -> None:
        played.append(1)
        await asyncio.sleep(0.01)

    await asyncio.gather(*(trunks.fork_for((1, "x"), play) for _ in range(4)))
    await trunks.fork_for((2, "x"), play)
    assert len(played) == 2


def test_mask_trunk_and_drop_trunk_turns():
    traj = TokenTrajectory([1, 2, 3], [9])
    traj.add_turn([10, 11], [-0.1, -0.2], "stop")
    traj.add_observation([20, 9])
    traj.add_turn([12, 13, 14], [-0.3, -0.4, -0.5], "stop")
    mask_trunk(traj, 1)
    assert traj.segment.loss_mask == [0, 0, 0, 0, 1, 1, 1]
    samples = [SimpleNamespace(metadata={STEP_KEY: {"turn": i}}) for i in range(3)]
    record = {"branch": {"at_step": 1}}
    assert drop_trunk_turns(samples, record, "turn") == samples[1:]
    assert drop_trunk_turns(samples, record, "segment") == samples
    assert drop_trunk_turns(samples, {}, "turn") == samples
