"""Routing replay, top-p replay and rollout metrics through the pinned slime's own code (`upstream_slime`).

The episode of `replay_episode` (compacting twice on the project's SGLang-protocol server) is cut into samples
of upstream's ``Sample`` class. Each must equal what upstream's ``append_response_tokens`` builds from the
same calls; the batch (a removed sample included) must pass ``RolloutManager._convert_samples_to_train_data``
under ``--use-rollout-routing-replay`` and ``--rollout-top-p 0.95`` (``validate_rollout_routed_experts_for_
replay`` and the top-p asserts inside), and ``prepare_routed_experts_for_routing_replay`` must lay one row per
position of every sample's tokens. slime's ``compute_metrics_from_samples`` then reports the server's true
prefix-cache hit rate. Skipped without slime's source; `test_replay.py` restates the contract for CI.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

import pytest
from replay_episode import (
    MOE,
    RestatedSample,
    calls_of,
    listed,
    play,
    replay_view,
    settings,
    slime_args,
    slime_path,
)

from swe_rl.slime.replay import fill_removed
from swe_rl.slime.samples import removed_sample, trajectory_samples
from swe_rl.testing.fake_sglang import FakeSGLang

torch = pytest.importorskip("torch")


def conversion_args(**over: Any) -> Namespace:
    return Namespace(
        **vars(slime_args()),
        advantage_estimator="grpo",
        reward_key=None,
        log_reward_category=None,
        **over,
    )


def convert(rollout: Any, args: Namespace, samples: list[Any]) -> dict[str, Any]:
    """slime's conversion of the flattened rollout (rewards passed through)."""
    manager = Namespace(
        args=args,
        custom_convert_samples_to_train_data_func=None,
        custom_reward_post_process_func=lambda a, s: ([x.reward for x in s], [x.reward for x in s]),
    )
    manager._post_process_rewards = lambda s: manager.custom_reward_post_process_func(args, s)
    return rollout.RolloutManager._convert_samples_to_train_data(manager, samples)


@pytest.fixture
async def episode(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE, speculative=True) as sglang:
        policy = await play(codec, sglang)
    return sglang, policy


@pytest.mark.parametrize("mode", ["segment", "turn"])
async def test_samples_equal_slimes_own_path_and_train_under_r3_and_top_p(
    upstream_slime, codec, qwen_tokenizer, mode
):
    with FakeSGLang(qwen_tokenizer, moe=MOE, speculative=True) as sglang:
        policy = await play(codec, sglang, routing_per_turn=mode == "turn")
    Sample = upstream_slime("slime.utils.types").Sample
    rollout = upstream_slime("slime.ray.rollout")
    data_utils = upstream_slime("slime.observability.rollout_data_utils")
    cp_utils = upstream_slime("slime.backends.megatron_utils.cp_utils")
    args = conversion_args()
    traj = policy.trajectory
    samples = trajectory_samples(
        Sample, Sample(index=0, group_index=0), traj, codec, {}, mode=mode, replay=settings()
    )
    groups = [[t] for t in traj.turns] if mode == "turn" else [s.turns for s in traj.segments if s.turns]
    assert len(samples) == len(groups) >= 3
    for sample, turns in zip(samples, groups):
        upstream = slime_path(Sample, args, calls_of(sglang, turns))
        assert replay_view(sample) == replay_view(upstream)  # slime's own path on the same calls
        assert replay_view(upstream) == replay_view(slime_path(RestatedSample, args, calls_of(sglang, turns)))
        sample._validate_response_metadata_lengths()  # slime's own consistency check of a sample
    removed = removed_sample(Sample, Sample(index=1, group_index=0), codec, {})
    fill_removed(removed, settings())
    batch = [*samples, removed]
    for s in batch:
        s.reward = 1.0

    data = convert(rollout, args, batch)  # validate_rollout_routed_experts_for_replay, the top-p asserts
    assert len(data["rollout_routed_experts"]) == len(data["rollout_top_p_token_ids"]) == len(batch)
    data["total_lengths"] = [len(t) for t in data["tokens"]]
    data_utils.tensorize_rollout_data_for_training(data)
    laid = cp_utils.prepare_routed_experts_for_routing_replay(
        data["rollout_routed_experts"],
        data["tokens"],
        num_experts=MOE[2],
        data_pad_size_multiplier=1,
        sequence_parallel=False,
        allgather_cp=False,
    )
    assert laid.shape == (sum(data["total_lengths"]), MOE[0], MOE[1])  # one row per position of every sample
    at = 0
    for s in batch:
        assert laid[at : at + len(s.tokens) - 1].tolist() == listed(s.rollout_routed_experts)
        at += len(s.tokens)

    missing = samples[0]
    missing.rollout_top_p_token_ids = None  # what the plugin gave before: slime's bare assert
    with pytest.raises(AssertionError):
        convert(rollout, args, batch)


async def test_slimes_rollout_metrics_report_the_servers_true_figures(upstream_slime, codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE, speculative=True) as sglang:
        policy = await play(codec, sglang)
    Sample = upstream_slime("slime.utils.types").Sample
    metrics = upstream_slime("slime.observability.rollout_metrics")
    samples = trajectory_samples(
        Sample,
        Sample(index=0, group_index=0),
        policy.trajectory,
        codec,
        {},
        mode="segment",
        replay=settings(),
    )
    for s in samples:
        s.reward = 1.0
    logged = metrics.compute_metrics_from_samples(conversion_args(), samples)
    answers = sglang.answers
    rate = sum(a["cached_tokens"] for a in answers) / sum(a["prompt_tokens"] for a in answers)
    assert logged["prefix_cache_hit_rate"] == pytest.approx(rate) and rate > 0.5  # multi-turn: mostly cached
    assert logged["avg_cached_tokens_per_sample"] == pytest.approx(
        sum(a["cached_tokens"] for a in answers) / len(samples)
    )
    assert logged["spec_accept_rate"] > 0 and logged["spec_accept_length"] > 1
    kept = sum(len(listed(s.rollout_top_p_token_ids)) for s in samples)
    assert logged["top_p_kept_vocab_per_token"] == pytest.approx(
        kept / sum(s.effective_response_length for s in samples)
    )
