"""OpenAIChatPolicy against the scripted OpenAI-compatible server (real HTTP, real litellm)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies import OpenAIChatConfig, OpenAIChatPolicy
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI

pytestmark = pytest.mark.slow  # imports litellm (~6 CPU-s), once in a fresh interpreter too

HELLO = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def policy(server: FakeOpenAI, **overrides) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(
        OpenAIChatConfig(
            **{"model": "acme/never-priced-model", "api_base": server.base_url, "retries": 0, **overrides}
        )
    )


async def test_turn_carries_text_reasoning_usage_and_finish_reason(caplog):
    reply = ChatReply(
        "```bash\nls\n```",
        reasoning_content="look around first",
        finish_reason="stop",
        usage={
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "total_tokens": 150,
            "completion_tokens_details": {"reasoning_tokens": 12},
        },
    )
    with FakeOpenAI([reply]) as server:
        turn = await policy(server).act(HELLO)
    assert turn.text == "```bash\nls\n```" and turn.reasoning == "look around first"
    assert turn.finish_reason == "stop" and turn.latency > 0
    assert (turn.usage.prompt_tokens, turn.usage.completion_tokens, turn.usage.reasoning_tokens) == (
        120,
        30,
        12,
    )
    assert turn.usage.total_tokens == 150 and turn.usage.calls == 1
    # a model without a price entry: no cost-tracking warnings or errors
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "cost" in r.getMessage().lower()
    ]


async def test_sampling_parameters_and_key_reach_the_server():
    with FakeOpenAI(["ok"], api_key="sk-test") as server:
        await policy(
            server,
            api_key="sk-test",
            temperature=0.7,
            top_p=0.95,
            top_k=40,
            max_tokens=256,
            extra_body={"chat_template_kwargs": {"enable_thinking": True}},
        ).act(HELLO)
    [body] = server.requests
    assert body["model"] == "acme/never-priced-model" and body["messages"] == HELLO
    assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"]) == (0.7, 0.95, 40, 256)
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert server.headers[0]["authorization"] == "Bearer sk-test"


async def test_unset_sampling_parameters_are_left_to_the_server():
    with FakeOpenAI(["ok"]) as server:
        await policy(server, temperature=None).act(HELLO)
    assert not {"temperature", "top_p", "top_k", "max_tokens"} & set(server.requests[0])


async def test_reasoning_content_is_sent_back_in_the_history():
    harness = BashBlockHarness()
    with FakeOpenAI([ChatReply("```bash\nls\n```", reasoning_content="step one thinking"), "done"]) as server:
        chat = policy(server)
        messages = list(HELLO)
        first = await chat.act(messages)
        messages += [harness.assistant_message(first), {"role": "user", "content": "<output>a.py</output>"}]
        await chat.act(messages)
    sent = server.requests[1]["messages"][2]
    assert sent == {
        "role": "assistant",
        "content": "```bash\nls\n```",
        "reasoning_content": "step one thinking",
    }


async def test_failed_requests_are_retried():
    with FakeOpenAI([ChatReply("busy", status=503), "ok"]) as server:
        turn = await policy(server, retries=1).act(HELLO)
    assert turn.text == "ok" and server.calls == 2


async def test_errors_and_timeouts_raise():
    with (
        FakeOpenAI([ChatReply("bad request", status=400)]) as server,
        pytest.raises(Exception, match="bad request"),
    ):
        await policy(server).act(HELLO)
    with FakeOpenAI([ChatReply("late", delay=2.5)]) as server:
        started = time.monotonic()
        with pytest.raises(Exception, match="(?i)timeout|timed out"):
            await policy(server, timeout=0.5).act(HELLO)
        assert time.monotonic() - started < 2.5


async def test_failures_are_typed_outages_apart_from_the_policys_own():
    """An endpoint that cannot serve the run (5xx, no answer, key or model refused) is PolicyUnreachable
    (eval: env_error, not graded); a refused request is PolicyBadResponse; an over-long prompt ContextExhausted."""
    from swe_rl.agent.errors import ContextExhausted, PolicyBadResponse, PolicyUnreachable

    for status in (500, 503, 401, 403, 404, 429):
        with FakeOpenAI([ChatReply(f"said {status}", status=status)]) as server:
            with pytest.raises(PolicyUnreachable, match=f"said {status}"):
                await policy(server).act(HELLO)
    with FakeOpenAI([ChatReply("no such field", status=400)]) as server:
        with pytest.raises(PolicyBadResponse, match="no such field") as info:
            await policy(server).act(HELLO)
        assert not isinstance(info.value, PolicyUnreachable)
    with FakeOpenAI([ChatReply("This model's maximum context length is 10 tokens", status=400)]) as server:
        with pytest.raises(ContextExhausted):
            await policy(server).act(HELLO)
    with FakeOpenAI([]) as server:
        dead = server.base_url
    with pytest.raises(PolicyUnreachable, match="policy endpoint failed"):
        await policy(server, api_base=dead).act(HELLO)


def test_litellm_is_imported_only_when_a_chat_policy_is_built():
    code = (
        "import sys, swe_rl.agent, swe_rl.policies, swe_rl.harnesses; "
        "assert 'litellm' not in sys.modules, 'imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("SWE_OPENAI_MODEL", "m")
    monkeypatch.setenv("SWE_OPENAI_API_BASE", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("SWE_OPENAI_TOP_K", "20")
    config = OpenAIChatConfig.from_env(temperature=0.3)
    assert (config.model, config.api_base, config.top_k, config.temperature) == (
        "m",
        "http://127.0.0.1:1/v1",
        20,
        0.3,
    )
