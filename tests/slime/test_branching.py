"""Pieces of the fork modes without a fleet: settings, one trunk per group, the trunk's mask
(swe_rl/slime/branching.py, swe_rl/slime/fork_mode.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from swe_rl.slime.branching import BranchSettings, Trunks, drop_trunk_turns, mask_trunk
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.fork_mode import RetrySettings
from swe_rl.slime.samples import STEP_KEY
from swe_rl.tokens.trajectory import TokenTrajectory


def test_settings_from_config():
    def cfg(**keys: object) -> PluginConfig:
        return PluginConfig.from_args(SimpleNamespace(**keys), env={})

    assert BranchSettings.from_config(cfg(), SimpleNamespace()) == BranchSettings(0, 1)
    args = SimpleNamespace(swe_branch_at_step=3, n_samples_per_prompt=8)
    assert BranchSettings.from_config(cfg(swe_branch_at_step=3), args) == BranchSettings(3, 8)
    assert RetrySettings.from_config(cfg(swe_retry_infra_failures=2)) == RetrySettings(2, 1)
    env = {"SWE_RETRY_INFRA_FAILURES": "1", "SWE_CHECKPOINT_EVERY": "4"}
    assert RetrySettings.from_config(PluginConfig.from_args(SimpleNamespace(), env=env)) == RetrySettings(
        1, 4
    )


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
