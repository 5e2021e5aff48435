"""swe-eval checks the model endpoint before its first instance: it answers, serves the model, takes the key.

Real HTTP on loopback (the scripted OpenAI server), no Docker: a failed check runs nothing."""

from __future__ import annotations

import signal

import pytest

from swe_rl.eval.endpoint_check import EndpointProblem, check_endpoint, served_name
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"


def dead_base() -> str:
    """The address of a server that was just stopped: nothing listens there."""
    with FakeOpenAI([]) as server:
        return server.base_url


def test_served_name_drops_the_provider_prefix():
    assert served_name("openai/Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert served_name("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


def test_an_endpoint_that_serves_the_model_passes():
    with FakeOpenAI([], models=["Qwen/Qwen3-8B", "other"], api_key="sk-1") as server:
        assert check_endpoint(server.base_url, "openai/Qwen/Qwen3-8B", "sk-1") == []
        assert server.calls == 0  # the model list said it: no completion spent


def test_nothing_answering_is_a_problem():
    with pytest.raises(EndpointProblem, match="does not answer"):
        check_endpoint(dead_base(), "openai/fake", "EMPTY", timeout=5)


def test_a_rejected_key_is_a_problem():
    with FakeOpenAI([], api_key="sk-right") as server:
        with pytest.raises(EndpointProblem, match=r"rejects the API key \(HTTP 401"):
            check_endpoint(server.base_url, "openai/fake", "sk-wrong")


def test_a_model_not_listed_is_a_problem_naming_what_is_served():
    with FakeOpenAI([], models=["Qwen/Qwen3-8B"]) as server:
        with pytest.raises(
            EndpointProblem, match=r"does not serve the model 'Qwen3-8B'.*lists: Qwen/Qwen3-8B"
        ):
            check_endpoint(server.base_url, "openai/Qwen3-8B", "EMPTY")


def test_without_a_model_list_a_one_token_completion_decides():
    with FakeOpenAI(["ok"], models=None) as server:
        assert check_endpoint(server.base_url, "openai/my-model", "EMPTY") == []
        assert server.requests[0]["model"] == "my-model" and server.requests[0]["max_tokens"] == 1
    with FakeOpenAI([ChatReply("model not found", status=404)], models=None) as server:
        with pytest.raises(EndpointProblem, match="has no GET /models.*HTTP 404"):
            check_endpoint(server.base_url, "openai/my-model", "EMPTY")
    with FakeOpenAI([ChatReply("down", status=502)], models=None) as server:
        with pytest.raises(EndpointProblem, match="HTTP 502"):
            check_endpoint(server.base_url, "openai/my-model", "EMPTY")
    with FakeOpenAI([], models=None, api_key="sk-right") as server:
        with pytest.raises(EndpointProblem, match="rejects the API key"):
            check_endpoint(server.base_url, "openai/my-model", "sk-wrong")
    with FakeOpenAI([ChatReply("max_tokens too small", status=400)], models=None) as server:
        (warning,) = check_endpoint(server.base_url, "openai/my-model", "EMPTY")
        assert "could not be checked" in warning and "HTTP 400" in warning


@pytest.fixture
def keep_sigterm():
    before = signal.getsignal(signal.SIGTERM)  # swe-eval's main turns SIGTERM into KeyboardInterrupt
    yield
    signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("case", ["dead", "model", "key"])
def test_swe_eval_stops_before_the_first_instance(case, tmp_path, capsys, keep_sigterm):
    """A typo in --api-base, --model or the key: a clear error, exit 4, no instance run, no fleet started."""
    from swe_rl.eval.eval_swe import EXIT_ENDPOINT, main

    with FakeOpenAI([], models=["served"], api_key="sk-right") as server:
        base = dead_base() if case == "dead" else server.base_url
        argv = ["--data", str(FIXTURES), "--output-dir", str(tmp_path / "run"), "--limit", "2"]
        argv += ["--model", "openai/typo" if case == "model" else "openai/served", "--api-base", base]
        argv += ["--api-key", "sk-wrong" if case == "key" else "sk-right", "--local-fleet"]
        assert main(argv) == EXIT_ENDPOINT
        assert server.calls == 0
    err = capsys.readouterr().err
    expected = {
        "dead": "does not answer",
        "model": "does not serve the model 'typo'",
        "key": "rejects the API key",
    }
    assert f"error: the endpoint {base}" in err and expected[case] in err and "nothing was run" in err
    assert not (tmp_path / "run").exists()
