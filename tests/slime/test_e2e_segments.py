"""One training sample per context segment (``swe_samples: segment``, the default) on the real local fleet:
each sampled id is in exactly one sample, with mask 1 and its log-prob, on exactly the ids it was sampled
on; compaction refills the context only to the low-water mark, so a segment holds many turns."""

from __future__ import annotations

import json

from agent_fixtures import leftover_containers
from test_e2e import SAMPLING, SUBMIT, new_sample, traj_dir, turn

from swe_rl.slime.e2e import generate
from swe_rl.testing.fake_sglang import FakeSGLang

NOISY = "seq 1 30 | sed 's/$/ lorem ipsum/'"
LIMIT, MAX_NEW = 1800, 128
BUDGET = LIMIT - MAX_NEW


async def play(plugin_env, qwen_tokenizer, **swe):
    script = [turn(f"Step {i}.", NOISY) for i in range(10)] + [turn("Stop.", SUBMIT)]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, context=LIMIT, step_limit=14, **{"context_low_water": 0.6, **swe})
        parent = new_sample(group=3, index=9)
        samples = await generate(args, parent, {**SAMPLING, "max_new_tokens": MAX_NEW})
    return samples, sglang.requests, sglang.outputs


def first_requests_of_segments(requests) -> list[int]:
    """Indexes of requests that do not extend the previous one: each starts a compacted segment."""
    out = [0]
    for i in range(1, len(requests)):
        prev, ids = requests[i - 1]["input_ids"], requests[i]["input_ids"]
        if ids[: len(prev)] != prev:
            out.append(i)
    return out


async def test_each_sampled_id_is_trained_once_on_the_context_it_was_sampled_on(
    plugin_env, qwen_tokenizer, pool, docker_client, tmp_path
):
    samples, requests, outputs = await play(plugin_env, qwen_tokenizer)
    starts = first_requests_of_segments(requests)
    assert len(starts) >= 2, "the script must overflow the context"
    assert isinstance(samples, list) and len(samples) == len(starts)
    info = samples[0].metadata["swe"]
    assert info["tokens"]["segments"] == len(samples) and info["prefix_breaks"] == 0
    for s in samples:
        assert (s.group_index, s.index, s.rollout_id) == (3, 9, 9)
        assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs) < len(s.tokens) <= LIMIT
    # every request's context is a prefix of its segment's sample, followed by what was sampled
    bounds = [*starts, len(requests)]
    for k, s in enumerate(samples):
        prompt_len = len(s.tokens) - s.response_length
        trained = [0] * s.response_length
        for i in range(bounds[k], bounds[k + 1]):
            ids, out = requests[i]["input_ids"], outputs[i]
            assert s.tokens[: len(ids)] == ids and s.tokens[len(ids) : len(ids) + len(out.ids)] == out.ids
            at = len(ids) - prompt_len
            assert at >= 0 and s.loss_mask[at : at + len(out.ids)] == [1] * len(out.ids)
            assert s.rollout_log_probs[at : at + len(out.ids)] == out.logprobs
            trained[at : at + len(out.ids)] = [1] * len(out.ids)
        assert s.loss_mask == trained  # observations, markers and the segment's prompt: mask 0
        assert all(lp == 0.0 for lp, m in zip(s.rollout_log_probs, s.loss_mask) if not m)
    assert sum(sum(s.loss_mask) for s in samples) == sum(len(o.ids) for o in outputs)
    # hysteresis: a compacted context starts at most low-water full (0.6 of the budget here)
    assert all(len(requests[i]["input_ids"]) <= 0.6 * BUDGET for i in starts[1:])
    meta = json.loads((traj_dir(tmp_path) / "meta.json").read_text())
    assert meta["segments"] == len(samples) and meta["config"]["samples"] == "segment"
    assert not leftover_containers(docker_client, pool)


async def test_low_water_gives_fewer_segments_than_refilling_to_the_budget(
    plugin_env, qwen_tokenizer, pool, docker_client
):
    low, _, _ = await play(plugin_env, qwen_tokenizer)  # 0.6
    full, requests, _ = await play(plugin_env, qwen_tokenizer, context_low_water=1.0)
    # refilled to the budget, the next turn overflows again: nearly every turn starts a segment
    assert len(full) == len(first_requests_of_segments(requests)) > len(low) >= 2
    # the same trajectory as per-turn samples: as many samples as turns, each holding its whole context
    turns, requests, outputs = await play(plugin_env, qwen_tokenizer, samples="turn")
    assert len(turns) == len(outputs) > len(low)
    segment_tokens = sum(len(s.tokens) for s in low)
    assert sum(len(s.tokens) for s in turns) > 2 * segment_tokens
    assert not leftover_containers(docker_client, pool)


async def test_generate_gives_each_segment_the_routing_top_p_and_counts_of_its_calls(
    plugin_env, qwen_tokenizer, pool
):
    """``--use-rollout-routing-replay`` and ``--rollout-top-p 0.95`` through the plugin's generate: each segment
    sample holds what slime's own path builds from its segment's calls (`replay_episode`)."""
    from replay_episode import MOE, RestatedSample, replay_view, slime_args, slime_path

    script = [turn(f"Step {i}.", NOISY) for i in range(10)] + [turn("Stop.", SUBMIT)]
    params = {
        **SAMPLING,
        "max_new_tokens": MAX_NEW,
        "top_p": 0.95,
        "custom_params": {"return_top_p_token_ids": True},
    }
    with FakeSGLang(qwen_tokenizer, script, moe=MOE, speculative=True) as sglang:
        args = plugin_env(sglang, context=LIMIT, step_limit=14, context_low_water=0.6)
        vars(args).update(vars(slime_args()))
        samples = await generate(args, new_sample(group=3, index=9), params)
    requests = sglang.requests
    assert all(r["return_routed_experts"] for r in requests)
    bounds = [*first_requests_of_segments(requests), len(requests)]
    assert len(samples) == len(bounds) - 1 >= 2
    for k, s in enumerate(samples):
        calls = [(requests[i]["input_ids"], sglang.answers[i]) for i in range(bounds[k], bounds[k + 1])]
        assert replay_view(s) == replay_view(slime_path(RestatedSample, slime_args(), calls))
    assert sum(s.prefix_cache_info.cached_tokens for s in samples) == sum(
        a["cached_tokens"] for a in sglang.answers
    )
