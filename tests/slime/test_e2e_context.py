"""The plugin against a policy server whose context window is smaller than the plugin's budget:
the budget is clamped to what the server states (one warning), and an overflow answer of a server
that states nothing ends the episode TRUNCATED (graded, not removed) and teaches the window."""

from __future__ import annotations

import logging

import pytest
from agent_fixtures import leftover_containers
from test_e2e import SAMPLING, SUBMIT, new_sample, turn

from swe_rl.policies.server_context import context_overflow
from swe_rl.slime.e2e import generate
from swe_rl.slime.reward import reward_func
from swe_rl.slime.runtime import PromptDoesNotFit
from swe_rl.testing.fake_sglang import FakeSGLang

BIG_BUDGET = 32768
LOOK = turn("Look around the repository first, " * 12, "ls")


@pytest.fixture
async def prompt_len(plugin_env, qwen_tokenizer, docker_client) -> int:
    """Ids of the fixture's first prompt (measured once with an unlimited server)."""
    with FakeSGLang(qwen_tokenizer, [turn("Done.", SUBMIT)]) as sglang:
        await generate(plugin_env(sglang), new_sample(), dict(SAMPLING))
        return len(sglang.requests[0]["input_ids"])


def fits(sglang: FakeSGLang) -> bool:
    return all(
        len(r["input_ids"]) + r["sampling_params"]["max_new_tokens"] < sglang.context_length
        for r in sglang.requests
    )


async def test_budget_is_clamped_to_the_stated_context_with_one_warning(
    plugin_env, qwen_tokenizer, prompt_len, caplog, pool, docker_client
):
    window = prompt_len + 400  # unclamped, the second turn (context + 256 new tokens) would be refused
    script = [LOOK, turn("Done.", SUBMIT)] * 2
    with (
        caplog.at_level(logging.INFO, logger="swe_rl"),
        FakeSGLang(qwen_tokenizer, script, context_length=window) as sglang,
    ):
        args = plugin_env(sglang, context=BIG_BUDGET)
        first = await generate(args, new_sample(), dict(SAMPLING))
        second = await generate(args, new_sample(index=8), dict(SAMPLING))
    assert sglang.refusals == [] and fits(sglang)  # never a 400: every turn stayed inside the window
    assert not any(s.remove_sample for s in first + second)
    assert (
        first[-1].metadata["swe"]["stop_reason"] == "context_exhausted"
    )  # ended by our own (clamped) budget
    warned = [
        r.getMessage()
        for r in caplog.records
        if "larger than the policy server's context length" in r.getMessage()
    ]
    assert (
        len(warned) == 1
        and f"{BIG_BUDGET} is larger" in warned[0]
        and f"clamped to {window - 1}" in warned[0]
    )
    assert sorted(set(sglang.info_requests)) <= [
        "/get_model_info",
        "/get_server_info",
        "/server_info",
        "/v1/models",
    ]
    assert len(sglang.info_requests) <= 4  # asked once per process, not per rollout
    assert not leftover_containers(docker_client, pool)


async def test_overflow_answer_ends_truncated_and_teaches_the_window(
    plugin_env, qwen_tokenizer, prompt_len, codec, pool, docker_client
):
    window = prompt_len + 400  # room for the first turn, not for the second with max_new_tokens 256
    with FakeSGLang(
        qwen_tokenizer,
        [LOOK, turn("Done.", SUBMIT), LOOK, turn("Done.", SUBMIT)],
        context_length=window,
        advertise_context=False,
    ) as sglang:
        args = plugin_env(sglang, context=BIG_BUDGET)
        samples = await generate(args, new_sample(), dict(SAMPLING))
        assert len(sglang.refusals) == 1 and "maximum context length of" in sglang.refusals[0]
        last = samples[-1]
        info = last.metadata["swe"]
        assert not last.remove_sample and last.status == last.Status.TRUNCATED
        assert info["stop_reason"] == "context_exhausted" and not info["removed"]
        assert (
            f"the policy server's context ({window} tokens) is smaller than this turn's budget"
            in info["error"]
        )
        assert info["status"] in (
            "no_patch",
            "unresolved",
        )  # graded: the policy's episode, not an infra failure
        (reward,) = await reward_func(args, [last])
        assert reward["score"] == -1.0 and not reward["removed"]
        # the next rollout of the process is clamped to the learned window: no second refusal
        again = await generate(args, new_sample(index=8), dict(SAMPLING))
    assert len(sglang.refusals) == 1 and not any(s.remove_sample for s in again)
    assert all(
        len(r["input_ids"]) + r["sampling_params"]["max_new_tokens"] < window
        for r in sglang.requests[-len(again) :]
    )
    assert not leftover_containers(docker_client, pool)


async def test_a_prompt_longer_than_the_server_context_is_removed_with_a_clear_reason(
    plugin_env, qwen_tokenizer, prompt_len, codec
):
    with FakeSGLang(
        qwen_tokenizer, [LOOK], context_length=prompt_len - 10, advertise_context=False
    ) as sglang:
        (s,) = await generate(plugin_env(sglang, context=BIG_BUDGET), new_sample(), dict(SAMPLING))
    assert "is longer than the model's context length" in sglang.refusals[0]
    assert s.remove_sample and s.loss_mask == [0]
    reason = s.metadata["swe"]["removed_reason"]
    assert reason.startswith("no_turns:") and f"context ({prompt_len - 10} tokens)" in reason
    assert s.response == codec.decode(s.tokens[-1:]) == "<|im_end|>"  # the one mask-0 id and its text agree


def test_overflow_messages_are_recognised():
    assert (
        context_overflow("The input (5000 tokens) is longer than the model's context length (4096 tokens).")
        == 4096
    )
    assert (
        context_overflow(
            '{"error": {"message": "Requested token count exceeds the model\'s maximum context '
            'length of 2048 tokens. You requested a total of 2100 tokens"}}'
        )
        == 2048
    )
    assert context_overflow("This model's maximum context length is 8192 tokens.") == 8192
    assert context_overflow("the request exceeds the available context size, try increasing it") == 0
    assert context_overflow("bad sampling params: temperature must be >= 0") is None


async def test_a_budget_that_cannot_hold_the_prompt_stops_the_run_naming_what_to_change(
    plugin_env, qwen_tokenizer, prompt_len, pool, docker_client
):
    """A configuration error, not a rollout's failure: the first such rollout raises (slime stops)
    instead of every rollout being removed with a warning each."""
    budget = prompt_len + SAMPLING["max_new_tokens"] - 50  # the prompt alone fits; with max_new_tokens not
    with FakeSGLang(qwen_tokenizer, [turn("Done.", SUBMIT)]) as sglang:
        args = plugin_env(sglang, context=budget)
        with pytest.raises(PromptDoesNotFit) as err:
            await generate(args, new_sample(), dict(SAMPLING))
    message = str(err.value)
    assert f"({prompt_len} ids) does not fit the context budget: {budget}" in message
    assert "--rollout-max-context-len" in message and "--rollout-max-response-len" in message
    assert sglang.requests == []  # nothing was generated
    assert not leftover_containers(docker_client, pool)


async def test_a_budget_equal_to_the_window_is_not_called_larger(
    plugin_env, qwen_tokenizer, prompt_len, caplog, pool, docker_client
):
    window = prompt_len + 400
    with (
        caplog.at_level(logging.INFO, logger="swe_rl"),
        FakeSGLang(qwen_tokenizer, [turn("Done.", SUBMIT)], context_length=window) as sglang,
    ):
        await generate(plugin_env(sglang, context=window), new_sample(), dict(SAMPLING))
    assert "larger than" not in caplog.text
    assert f"context budget {window} equals the policy server's context length" in caplog.text
    assert fits(sglang)
