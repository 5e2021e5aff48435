"""Routing replay, top-p replay and slime's rollout counts on the plugin's samples (restated contract, always run).

An episode compacts twice against the project's SGLang-protocol server (MoE routing, top-p ids, prefix cache,
speculative counts). Each sample must hold what slime's own multi-turn path (``append_response_tokens`` at
the pin, restated in `replay_episode.RestatedSample`) builds from the calls its tokens came from: one row of
routed experts per position of ``tokens[:-1]`` (a compacted segment's from its own calls), top-p spans per
response id, the prefix-cache and speculative counts of its calls, each call counted once per rollout.
``test_replay_upstream.py`` runs the same through slime's real code.
"""

from __future__ import annotations

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

from swe_rl.agent.errors import PolicyBadResponse
from swe_rl.slime.replay import ReplaySettings, fill_removed
from swe_rl.slime.samples import CompatSample, removed_sample, trajectory_samples
from swe_rl.testing.fake_sglang import FakeSGLang
from swe_rl.testing.fake_sglang_extras import b64_int32
from swe_rl.tokens.replay import ReplayError, TurnMeta, turn_meta


def segment_samples(policy, codec, mode="segment", replay=None):
    parent = CompatSample(index=3, group_index=1)
    return trajectory_samples(
        CompatSample, parent, policy.trajectory, codec, {}, mode=mode, replay=replay or settings()
    )


async def test_segment_samples_hold_what_slimes_path_builds_from_their_calls(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE, speculative=True) as sglang:
        policy = await play(codec, sglang)
    traj = policy.trajectory
    segments = [s for s in traj.segments if s.turns]
    assert len(segments) >= 3, traj.summary()  # compacted twice
    assert all(r["return_routed_experts"] is True for r in sglang.requests)  # every call asks
    samples = segment_samples(policy, codec)
    assert len(samples) == len(segments)
    for sample, seg in zip(samples, segments):
        reference = slime_path(RestatedSample, slime_args(), calls_of(sglang, seg.turns))
        assert replay_view(sample) == replay_view(reference)
        routed = listed(sample.rollout_routed_experts)
        assert len(routed) == len(sample.tokens) - 1 and all(len(r) == MOE[0] for r in routed)
        assert len(listed(sample.rollout_top_p_token_offsets)) == sample.response_length + 1
    # a compacted segment re-renders history: its rows are its own calls', which differ from the previous
    # segment's at the first position the two contexts differ
    first, second = samples[0], samples[1]
    split = next(i for i, (a, b) in enumerate(zip(first.tokens, second.tokens)) if a != b)
    assert listed(first.rollout_routed_experts)[:split] == listed(second.rollout_routed_experts)[:split]
    assert listed(first.rollout_routed_experts)[split] != listed(second.rollout_routed_experts)[split]
    assert (
        0 < sglang.answers[segments[1].turns[0].index]["cached_tokens"] <= split
    )  # the shared prefix, cached
    # every call counted once over the rollout: slime's ratio of sums is the server's true hit rate
    cached = sum(a["cached_tokens"] for a in sglang.answers)
    assert sum(s.prefix_cache_info.cached_tokens for s in samples) == cached > 0
    assert sum(s.prefix_cache_info.total_prompt_tokens for s in samples) == sum(
        a["prompt_tokens"] for a in sglang.answers
    )
    assert sum(s.spec_info.spec_verify_ct for s in samples) == sum(
        a["spec_verify_ct"] for a in sglang.answers
    )
    # one copy of a segment's rows: only its last turn keeps them
    assert [t.meta.routed_experts is not None for t in traj.turns] == [
        t is traj.segments[t.segment].turns[-1] for t in traj.turns
    ]


async def test_turn_samples_hold_their_own_calls(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE, speculative=True) as sglang:
        policy = await play(codec, sglang, turns=6, routing_per_turn=True)
    samples = segment_samples(policy, codec, mode="turn")
    assert len(samples) == len(policy.trajectory.turns) == 6
    for sample, turn in zip(samples, policy.trajectory.turns):
        reference = slime_path(RestatedSample, slime_args(), calls_of(sglang, [turn]))
        assert replay_view(sample) == replay_view(reference)


async def test_last_sample_counts_every_call(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE) as sglang:
        policy = await play(codec, sglang, turns=6)
    (sample,) = segment_samples(policy, codec, mode="last")
    seg = [s for s in policy.trajectory.segments if s.turns][-1]
    reference = slime_path(RestatedSample, slime_args(), calls_of(sglang, seg.turns))
    assert listed(sample.rollout_routed_experts) == listed(reference.rollout_routed_experts)
    assert sample.prefix_cache_info.cached_tokens == sum(a["cached_tokens"] for a in sglang.answers)


async def test_incremental_routing_asks_only_new_rows_and_merges_as_slime(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE) as sglang:
        policy = await play(codec, sglang, incremental_routing=True)
    traj = policy.trajectory
    for turn in traj.turns:
        first = turn is traj.segments[turn.segment].turns[0]
        start = sglang.requests[turn.index].get("routed_experts_start_len")
        assert (
            (start is None)
            if first
            else start == traj.turns[turn.index - 1].start + len(traj.turns[turn.index - 1].ids) - 1
        )
    for sample, seg in zip(segment_samples(policy, codec), [s for s in traj.segments if s.turns]):
        assert replay_view(sample) == replay_view(
            slime_path(RestatedSample, slime_args(), calls_of(sglang, seg.turns))
        )


async def test_routing_asked_of_a_server_without_it_is_a_clear_error(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer) as sglang:  # not started with --enable-return-routed-experts
        with pytest.raises(PolicyBadResponse, match="enable-return-routed-experts"):
            await play(codec, sglang, turns=1)


def test_answers_that_do_not_fit_their_ids_are_refused():
    ok = {"routed_experts": b64_int32(list(range(4 * 6))), "cached_tokens": 2, "prompt_tokens": 3}
    meta = turn_meta(ok, context_len=3, n_ids=2, previous=None, want_routing=True, want_top_p=False)
    assert meta.routed_rows == 4 and meta.routed_width == 6 and meta.stats.cached_tokens == 2
    with pytest.raises(ReplayError, match="do not fit"):  # 24 ints over 5 positions
        turn_meta(ok, context_len=4, n_ids=2, previous=None, want_routing=True, want_top_p=False)
    with pytest.raises(ReplayError, match="no rows before"):
        turn_meta(
            {**ok, "routed_experts_start_len": 2},
            context_len=5,
            n_ids=2,
            previous=None,
            want_routing=True,
            want_top_p=False,
        )
    with pytest.raises(ReplayError, match="top_p_token_ids"):
        turn_meta({}, context_len=3, n_ids=2, previous=None, want_routing=False, want_top_p=True)
    empty = turn_meta({}, context_len=3, n_ids=0, previous=None, want_routing=False, want_top_p=True)
    assert (empty.top_p_ids, empty.top_p_offsets) == (b"", b"\x00\x00\x00\x00")  # no ids: one offset
    bad_offsets = {"top_p_token_ids": b64_int32([5, 6, 7]), "top_p_token_offsets": b64_int32([0, 2])}
    with pytest.raises(ReplayError, match="top-p offsets"):
        turn_meta(bad_offsets, context_len=3, n_ids=2, previous=None, want_routing=False, want_top_p=True)
    merged = turn_meta(
        {"routed_experts": b64_int32([9] * 6), "routed_experts_start_len": 3},
        context_len=3,
        n_ids=2,
        previous=TurnMeta(routed_experts=meta.routed_experts, routed_width=6),
        want_routing=True,
        want_top_p=False,
    )
    assert merged.routed_rows == 4 and merged.routed_experts[-24:] == b64_decode_ints([9] * 6)


def b64_decode_ints(values):
    import base64

    return base64.b64decode(b64_int32(values))


async def test_samples_refuse_rows_of_another_model_shape(codec, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, moe=MOE) as sglang:
        policy = await play(codec, sglang, turns=2)
    with pytest.raises(ValueError, match="num_layers 4"):
        segment_samples(policy, codec, replay=settings(num_layers=4))
    with pytest.raises(ValueError, match="top-p"):  # top-p replay on, but the calls kept no ids
        for turn in policy.trajectory.turns:
            turn.meta.top_p_offsets = None
        segment_samples(policy, codec)


def test_a_removed_sample_has_what_slimes_conversion_needs(codec):
    sample = removed_sample(CompatSample, CompatSample(index=0), codec, {})
    fill_removed(sample, settings())
    rows = listed(sample.rollout_routed_experts)
    assert len(rows) == len(sample.tokens) - 1 >= 1
    layers, topk, experts = MOE
    assert all(len(r) == layers and all(len(set(k)) == topk and max(k) < experts for k in r) for r in rows)
    assert listed(sample.rollout_top_p_token_offsets) == [0] * (sample.response_length + 1)
    assert listed(sample.rollout_top_p_token_ids) == []
    untouched = removed_sample(CompatSample, CompatSample(index=0), codec, {})
    fill_removed(untouched, ReplaySettings())  # neither option: nothing added
    assert untouched.rollout_routed_experts is None and untouched.rollout_top_p_token_ids is None


def test_the_fake_servers_prefix_cache_is_sglangs():
    """A call reuses the KV an earlier call computed (its input and output but the last id), at most its input
    less one id; cached positions keep the routing of the call that computed them; old entries are evicted."""
    from swe_rl.testing.fake_sglang_extras import PrefixCache, replay_meta

    cache = PrefixCache(capacity=2)
    body = {"input_ids": [1, 2, 3], "return_routed_experts": True}
    first = replay_meta(cache, body, [4, 5], 1, MOE, False)
    assert first["cached_tokens"] == 0
    again = replay_meta(cache, {**body, "input_ids": [1, 2, 3, 4, 5, 6]}, [7], 2, MOE, False)
    assert again["cached_tokens"] == 4  # 1 2 3 4 (5 was never fed back)
    width = MOE[0] * MOE[1]
    import base64

    rows_first = base64.b64decode(first["routed_experts"])
    rows_again = base64.b64decode(again["routed_experts"])
    assert rows_again[: 4 * width * 4] == rows_first[: 4 * width * 4]  # cached rows: the first call's
    assert rows_again[4 * width * 4 : 5 * width * 4] != rows_first[4 * width * 4 :]  # recomputed: this call's
    assert (
        replay_meta(cache, {"input_ids": [1, 2, 3]}, [9], 3, None, False)["cached_tokens"] == 2
    )  # input - 1
    replay_meta(cache, {"input_ids": [8]}, [9], 4, None, False)
    replay_meta(cache, {"input_ids": [8, 8]}, [9], 5, None, False)  # two newer entries: [1, 2, 3...] evicted
    assert replay_meta(cache, {"input_ids": [1, 2, 3, 4]}, [9], 6, None, False)["cached_tokens"] == 0
    refused = replay_meta(cache, {**body, "routed_experts_start_len": 9}, [4], 6, MOE, False)
    assert isinstance(refused, str) and "routed_experts_start_len" in refused
