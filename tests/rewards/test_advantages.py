"""The reward post-process (swe_rl.slime.post_process over swe_rl.rewards.advantages) against upstream
slime's default, restated in tests/upstream_rewards.py.

`upstream_post_process` restates, in our own words, what ``RolloutManager._post_process_rewards`` does at
the pinned commit (third_party/slime.md) after ``_get_rollout_data`` flattened the rollout (while the first
item is a list, chain one level): take each sample's reward value; for grpo / gspo / cispo /
reinforce_plus_plus_baseline with rewards normalisation, view the flat rewards as rows of
``n_samples_per_prompt`` when there are exactly ``n_samples_per_prompt × rollout_batch_size`` of them, else as
one row of everything; subtract the row mean; for grpo / gspo / cispo with std normalisation divide by the
row's unbiased std + 1e-6. `upstream_mask_sums` restates ``_convert_samples_to_train_data``'s per-rollout
loss denominators (sum of the loss masks of every sample sharing a rollout id; a missing id gets a fresh one).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from upstream_rewards import flatten, upstream_mask_sums, upstream_post_process

from swe_rl.slime.post_process import post_process_rewards
from swe_rl.slime.samples import CompatSample as Sample

# --------------------------------------------------------------------------- rollouts like the plugin's


def args_for(
    n: int, batch: int, estimator: str = "grpo", std: bool = True, norm: bool = True
) -> SimpleNamespace:
    return SimpleNamespace(
        advantage_estimator=estimator,
        rewards_normalization=norm,
        grpo_std_normalization=std,
        n_samples_per_prompt=n,
        rollout_batch_size=batch,
        reward_key="score",
    )


def trajectory(
    group: int,
    index: int,
    outcome: float,
    steps: int,
    *,
    removed: bool = False,
    aborted: bool = False,
    prm: list[float | None] | None = None,
    coef: float = 1.0,
) -> list[Sample]:
    """What the plugin returns in dynamic-history mode: one sample per step, siblings share rollout_id."""
    if removed:  # a removed rollout is one minimal sample: zero mask, preset reward
        return [
            Sample(
                group_index=group,
                index=index,
                rollout_id=index,
                tokens=[1, 2, 3, 4],
                response_length=1,
                loss_mask=[0],
                remove_sample=True,
                status=Sample.Status.FAILED,
                reward={"score": 0.0, "removed": True},
            )
        ]
    out = []
    for k in range(steps):
        reward = {"score": outcome, "removed": False}
        if prm is not None:
            reward = {
                "score": outcome + coef * prm[k] if prm[k] is not None else outcome,
                "outcome": outcome,
                "removed": False,
            }
        out.append(
            Sample(
                group_index=group,
                index=index,
                rollout_id=index,
                tokens=[1, 2, 3] + [5] * (k + 3),
                response_length=3 + k,
                loss_mask=[1] * (3 + k),
                status=Sample.Status.ABORTED if aborted else Sample.Status.COMPLETED,
                reward=None if aborted else reward,
            )
        )
    return out


def grpo(rewards: list[float], std: bool = True) -> list[float]:
    """Plain GRPO over one group's trajectory rewards (upstream's formula, one sample per trajectory)."""
    if len(rewards) < 2:
        return [0.0] * len(rewards)
    return upstream_post_process(
        args_for(len(rewards), 1, std=std), [Sample(reward={"score": r}) for r in rewards]
    )[1]


def rollout() -> list[list[list[Sample]]]:
    """Two prompts × n=4: trajectories of 1..10 steps, one removed, one aborted (a non-slime abort is removed)."""
    g0 = [
        trajectory(0, 0, 1.0, 1),
        trajectory(0, 1, 1.0, 3),
        trajectory(0, 2, -1.0, 7),
        trajectory(0, 3, -1.0, 2),
    ]
    g1 = [
        trajectory(1, 4, -1.0, 10),
        trajectory(1, 5, 1.0, 1),
        trajectory(1, 6, 0.0, 1, removed=True),
        trajectory(1, 7, 0.0, 2, aborted=True),
    ]
    return [g0, g1]


# --------------------------------------------------------------------------- tests


def test_upstream_default_mixes_steps_groups_and_removed_samples():
    args = args_for(4, 2)
    samples = flatten(rollout())
    for s in samples:
        if s.reward is None:
            s.reward = {"score": 0.0}  # upstream would crash on None; give it the removed score
    _, upstream = upstream_post_process(args, samples)
    assert len(samples) != 4 * 2  # so upstream normalised over one batch-wide row of step samples
    by_traj = {}
    for s, a in zip(samples, upstream):
        by_traj.setdefault(s.rollout_id, set()).add(round(a, 6))
    # one batch-wide row: a reward gets the same advantage in both groups whatever its group's spread, the
    # removed 0.0 sits in the statistics with a non-zero advantage, and the 10-step failure weighs 10 times ...
    assert by_traj[0] == by_traj[1] == by_traj[5] and by_traj[2] == by_traj[4]
    assert by_traj[6] != {0.0}
    # ... whereas per trajectory within its group: g0 = [1, 1, -1, -1] → ±0.866; g1 = [-1, 1] → ∓0.707
    _, ours = post_process_rewards(args, samples)
    mine = {s.rollout_id: round(a, 3) for s, a in zip(samples, ours)}
    assert mine == {0: 0.866, 1: 0.866, 2: -0.866, 3: -0.866, 4: -0.707, 5: 0.707, 6: 0.0, 7: 0.0}
    assert upstream != ours


def test_issue_example_batch_wide_vs_per_group():
    # the run quoted in the issue: prompt A = two 1-step trajectories scored 0; prompt B = a failed 7-step and a
    # resolved 3-step trajectory. 12 step samples ≠ 2 × 2, so upstream normalised over one batch-wide row.
    groups = [
        [trajectory(0, 0, 0.0, 1), trajectory(0, 1, 0.0, 1)],
        [trajectory(1, 2, -1.0, 7), trajectory(1, 3, 1.0, 3)],
    ]
    args = args_for(2, 2)
    samples = flatten(groups)
    _, upstream = upstream_post_process(args, samples)
    assert [round(a, 3) for a in upstream] == [0.376, 0.376] + [-0.751] * 7 + [1.502] * 3
    _, ours = post_process_rewards(args, samples)
    assert [round(a, 3) for a in ours] == [0.0, 0.0] + [-0.707] * 7 + [0.707] * 3


@pytest.mark.parametrize("std", [True, False])
@pytest.mark.parametrize("estimator", ["grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"])
def test_per_trajectory_equals_plain_grpo_on_trajectory_rewards(std, estimator):
    groups = rollout()
    args = args_for(4, 2, estimator=estimator, std=std)
    samples = flatten(groups)
    _, ours = post_process_rewards(args, samples)
    use_std = std and estimator != "reinforce_plus_plus_baseline"
    for group in groups:
        valid = [t for t in group if not t[0].remove_sample and t[0].status is not Sample.Status.ABORTED]
        expected = dict(
            zip((t[0].rollout_id for t in valid), grpo([t[-1].reward["score"] for t in valid], use_std))
        )
        for traj in group:
            got = {round(ours[samples.index(s)], 9) for s in traj}
            assert got == {round(expected.get(traj[0].rollout_id, 0.0), 9)}, (traj[0].rollout_id, got)


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_one_sample_per_trajectory_matches_upstream_exactly(steps):
    # when every trajectory gives the same number of samples the values must not depend on that number
    groups = [
        [trajectory(g, g * 4 + i, r, steps) for i, r in enumerate(rs)]
        for g, rs in enumerate([[1, -1, -1, -1], [1, 1, -1, 1]])
    ]
    args = args_for(4, 2)
    _, ours = post_process_rewards(args, flatten(groups))
    one_each = flatten([[t[0] for t in g] for g in groups])
    _, upstream = upstream_post_process(args, one_each)
    assert [round(a, 9) for a in ours[::steps]] == [round(a, 9) for a in upstream]


def test_without_normalisation_raw_rewards_pass_through_except_excluded():
    samples = flatten(rollout())
    raw, ours = post_process_rewards(args_for(4, 2, norm=False), samples)
    for s, r, a in zip(samples, raw, ours):
        if s.remove_sample or s.status is Sample.Status.ABORTED:
            assert a == 0.0
        else:
            assert a == r == s.reward["score"]
    _, ppo = post_process_rewards(args_for(4, 2, estimator="ppo"), samples)
    assert ppo == ours


def test_prm_step_scores_are_added_after_normalisation():
    prm = [1.0, -1.0, None]
    groups = [[trajectory(0, 0, 1.0, 3, prm=prm, coef=0.5), trajectory(0, 1, -1.0, 1, prm=[1.0], coef=0.5)]]
    samples = flatten(groups)
    raw, ours = post_process_rewards(args_for(2, 1), samples)
    assert raw == [1.5, 0.5, 1.0, -0.5]
    base = 1 / math.sqrt(2) / (1 + 1e-6 / math.sqrt(2))  # (1 - 0) / (std(1, -1) + 1e-6)
    assert [round(a, 6) for a in ours] == [round(x, 6) for x in (base + 0.5, base - 0.5, base, -base + 0.5)]


def test_a_group_with_one_valid_trajectory_gets_zero_and_never_nan():
    groups = [[trajectory(0, 0, 1.0, 2), trajectory(0, 1, 0.0, 1, removed=True)]]
    _, ours = post_process_rewards(args_for(2, 1), flatten(groups))
    assert ours == [0.0, 0.0, 0.0]


def test_each_trajectory_weighs_once_in_the_loss_whatever_its_steps():
    # the per-rollout mean of upstream's loss reducer: each sample's tokens count mask / rollout total, so the
    # weights of one trajectory sum to 1 — a 10-step trajectory weighs what a 1-step one does
    samples = flatten(rollout())
    sums = upstream_mask_sums(samples)
    weight: dict[int, float] = {}
    for s, total in zip(samples, sums):
        mask = [0] * s.response_length if s.remove_sample else s.loss_mask
        weight[s.rollout_id] = weight.get(s.rollout_id, 0.0) + sum(mask) / max(total, 1)
    assert {rid: round(w, 9) for rid, w in weight.items()} == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 0, 7: 1}
    # (7 is an aborted trajectory: slime drops those unless partial rollout recycles them; its advantage is 0)


def test_groups_without_group_index_fall_back_to_rows_of_n_trajectories():
    samples = flatten(rollout())
    for s in samples:
        s.group_index = None
    _, ours = post_process_rewards(args_for(4, 2), samples)
    assert {s.rollout_id: round(a, 3) for s, a in zip(samples, ours)}[4] == -0.707


def test_whole_trajectory_samples_without_rollout_id_use_their_index():
    samples = [
        Sample(group_index=0, index=i, reward={"score": r}, response_length=1, loss_mask=[1])
        for i, r in enumerate([1.0, -1.0])
    ]
    _, ours = post_process_rewards(args_for(2, 1), samples)
    assert [round(a, 3) for a in ours] == [0.707, -0.707]


# --------------------------------------------------------------------------- the list-aware filter


def test_trajectory_filter_judges_trajectories_not_steps():
    from swe_rl.slime.filters import (
        check_trajectory_reward_nonzero_std,
        check_trajectory_reward_nonzero_std_with_fallback,
    )

    args = args_for(4, 1)
    mixed = [trajectory(0, 0, 1.0, 5), trajectory(0, 1, -1.0, 1)]
    same = [trajectory(0, 0, -1.0, 5), trajectory(0, 1, -1.0, 1), trajectory(0, 2, 0.0, 1, removed=True)]
    lonely = [
        trajectory(0, 0, 1.0, 3),
        trajectory(0, 1, 0.0, 1, removed=True),
        trajectory(0, 2, 0.0, 2, aborted=True),
    ]
    assert check_trajectory_reward_nonzero_std(args, mixed).keep
    out = check_trajectory_reward_nonzero_std(args, same)
    assert not out.keep and out.reason == "zero_std_-1.0"  # the removed 0.0 does not make a spread
    out = check_trajectory_reward_nonzero_std(args, lonely)
    assert not out.keep and out.reason == "valid_trajectories_1"
    assert check_trajectory_reward_nonzero_std_with_fallback(args, same).keep_when_insufficient
    # whole-trajectory mode: group items are Samples
    assert check_trajectory_reward_nonzero_std(args, [t[0] for t in mixed]).keep


def test_float_rewards_without_a_reward_key_like_upstreams_agent_example():
    # upstream's coding-agent example: one sample per branch, the trajectory's full reward (a float) on each,
    # a shared rollout_id; a failed rollout is one ABORTED sample with remove_sample and reward 0.0
    args = SimpleNamespace(**{**vars(args_for(3, 1)), "reward_key": None})

    def branches(index: int, reward: float, k: int) -> list[Sample]:
        return [
            Sample(
                group_index=0,
                index=index,
                rollout_id=index,
                reward=reward,
                response_length=2,
                loss_mask=[1, 1],
            )
            for _ in range(k)
        ]

    failed = Sample(
        group_index=0,
        index=3,
        rollout_id=3,
        reward=0.0,
        remove_sample=True,
        status=Sample.Status.ABORTED,
        response_length=1,
        loss_mask=[0],
    )
    samples = branches(1, 1.0, 3) + branches(2, 0.0, 1) + [failed]
    _, ours = post_process_rewards(args, samples)
    assert [round(a, 3) for a in ours] == [0.707] * 3 + [-0.707, 0.0]
