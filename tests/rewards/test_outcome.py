"""The outcome reward (swe_rl.rewards.outcome): resolved, unresolved, removed and flagged rollouts."""

from __future__ import annotations

from swe_rl.rewards.outcome import OutcomeRewards, outcome_score
from swe_rl.rewards.prm_mix import mixed_reward


def test_each_outcome_gets_its_score_and_removal_wins():
    rewards = OutcomeRewards(resolved=1.0, unresolved=-1.0, removed=0.0, flagged=-2.0)
    assert outcome_score(rewards, resolved=True, removed=False) == 1.0
    assert outcome_score(rewards, resolved=False, removed=False) == -1.0
    assert outcome_score(rewards, resolved=True, removed=True) == 0.0  # never a negative reward, never a gain
    assert outcome_score(rewards, resolved=True, removed=False, flagged=True) == -2.0
    assert outcome_score(rewards, resolved=False, removed=True, flagged=True) == 0.0


def test_flagged_keeps_the_outcome_without_a_flagged_score():
    rewards = OutcomeRewards()
    assert outcome_score(rewards, resolved=True, removed=False, flagged=True) == 1.0
    assert outcome_score(rewards, resolved=False, removed=False, flagged=True) == -1.0


def test_prm_mix_adds_the_step_bonus_to_the_outcome():
    assert mixed_reward(outcome_score(OutcomeRewards(), resolved=True, removed=False), -1.0, 0.25) == 0.75
