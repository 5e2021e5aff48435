"""The PRM step judge: verdict parsing, caps, aggregation, config, and `StepJudge` against a scripted
OpenAI-compatible judge on loopback (valid, invalid, slow and failing votes decided by the prompt)."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import httpx
import pytest
import yaml
from judge_fixtures import current, scripted_judge

from swe_rl.agent import Step
from swe_rl.agent.protocols import PolicyTurn
from swe_rl.configs import config_text
from swe_rl.rewards.prm import JudgeClient, PRMConfig, StepJudge, clip, parse_vote
from swe_rl.rewards.prm_mix import mixed_reward
from swe_rl.slime.config import PluginConfig
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI


@pytest.mark.parametrize(
    ("text", "vote"),
    [
        ("The step is useful. \\boxed{+1}", 1),
        ("\\boxed{1}", 1),
        ("It breaks the build.\n\\boxed{-1}", -1),
        ("\\boxed{ +1 }", 1),
        ("first \\boxed{-1}, on second thought \\boxed{+1}", 1),  # the last one wins
        ("\\boxed{+1} ... actually no: \\boxed{-1}", -1),
        ("<think>maybe \\boxed{+1}</think>\nNo. \\boxed{-1}", -1),  # thinking is not the verdict
        ("<think>cut off while thinking \\boxed{+1}", None),
        ("\\boxed{0}", None),
        ("\\boxed{good}", None),
        ("\\boxed{+1} or \\boxed{maybe}", None),
        ("\\boxed{\\text{+1}}", None),
        ("+1", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_vote(text, vote):
    assert parse_vote(text) == vote


def test_clip_keeps_head_and_tail():
    assert clip("short", 10) == "short" and clip("x" * 50, None) == "x" * 50
    text = "HEAD" + "m" * 1000 + "TAIL"
    out = clip(text, 100)
    assert out.startswith("HEAD") and out.endswith("TAIL") and "[... 908 characters omitted ...]" in out
    assert len(out) < 150


def test_mixed_reward():
    assert mixed_reward(1.0, None, 0.5) == 1.0
    assert mixed_reward(-1.0, 1 / 3, 1.5) == pytest.approx(-0.5)
    assert mixed_reward(1.0, -1.0, 1.0) == 0.0


# --------------------------------------------------------------------------- config


def test_config_from_yaml_mapping_flat_keys_and_environment():
    args = SimpleNamespace(
        swe_prm={"enable": True, "url": "http://prm:30000/v1", "m": 5}, swe_prm_step_coef=0.25
    )
    env = {
        "SWE_PRM_M": "7",
        "SWE_PRM_TEMPERATURE": "0.2",
        "SWE_PRM_SKIP_SUBMIT": "false",
        "SWE_PRM_EXTRA_BODY": '{"chat_template_kwargs": {"enable_thinking": false}}',
    }
    prm = PluginConfig.from_args(args, env=env).prm
    assert (prm.enable, prm.url, prm.m, prm.step_coef) == (True, "http://prm:30000/v1", 5, 0.25)  # args win
    assert prm.temperature == 0.2 and prm.skip_submit is False
    assert prm.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    only_env = PluginConfig.from_sources(None, env={"SWE_PRM_ENABLE": "1", "SWE_PRM_URL": "http://j/v1"}).prm
    assert only_env.enable and only_env.url == "http://j/v1" and only_env.m == 3


def test_enabled_without_url_and_bad_values_are_clear_errors():
    with pytest.raises(ValueError, match="no judge URL"):
        PluginConfig.from_sources(None, env={"SWE_PRM_ENABLE": "true"})
    with pytest.raises(ValueError, match="m"):
        PluginConfig.from_sources(None, env={"SWE_PRM_M": "0"})
    with pytest.raises(ValueError, match="extra_forbidden"):
        PluginConfig.from_sources(SimpleNamespace(swe_prm={"coef": 1.0}), env={})


def test_shipped_yaml_documents_every_prm_key_with_its_default_and_the_key_is_never_written(
    tmp_path, monkeypatch
):
    # The shipped file names its prompt template by a relative path; from another checkout's folder it would
    # name that checkout's copy (two checkouts sharing one Python: two CI runs side by side).
    monkeypatch.chdir(tmp_path)
    data = yaml.safe_load(config_text("plugin_swe.yaml"))
    assert set(data["swe_prm"]) == set(PRMConfig.model_fields)
    assert PRMConfig(**data["swe_prm"]) == PRMConfig()
    config = PluginConfig.from_sources(None, env={"SWE_PRM_API_KEY": "sk-secret"})
    assert "sk-secret" not in json.dumps(config.model_dump(mode="json"))


# --------------------------------------------------------------------------- the judge


def step(
    index: int,
    command: str | None,
    output: str = "",
    *,
    response: str | None = None,
    format_error: str | None = None,
) -> tuple[Step, PolicyTurn]:
    text = response if response is not None else f"Step {index}.\n\n```bash\n{command}\n```"
    return (
        Step(
            index=index,
            action=command,
            observation=output,
            returncode=None if command is None else 0,
            format_error=format_error,
        ),
        PolicyTurn(text=text, reasoning=f"thinking {index}"),
    )


def client_for(server: FakeOpenAI, **overrides) -> JudgeClient:
    return JudgeClient(PRMConfig(**{"enable": True, "url": server.base_url, "retries": 0, **overrides}))


async def test_votes_scores_and_alignment_with_valid_invalid_slow_and_failing_judges():
    judge_fn = scripted_judge(
        GOOD=ChatReply("Useful. \\boxed{+1}"),
        MIXED=[ChatReply("\\boxed{+1}"), ChatReply("Hmm. \\boxed{-1}"), ChatReply("I cannot decide.")],
        BAD=ChatReply("<think>\\boxed{+1}?</think> Wrong file. \\boxed{-1}"),
        GARBLED=ChatReply("\\boxed{0}"),
        FAIL=ChatReply("judge down", status=500),
        SLOW=ChatReply("\\boxed{+1}", delay=30),  # still thinking when the episode ends
    )
    with FakeOpenAI([judge_fn] * 100) as server:
        client = client_for(server)
        judge = StepJudge(client, issue="interleave stops early")
        script = [
            step(0, "echo GOOD"),
            step(1, "echo MIXED"),
            step(2, None, response="rambling", format_error="no block"),
            step(3, "echo BAD"),
            step(4, "echo GARBLED"),
            step(5, "echo FAIL"),
            step(6, "echo SLOW"),
            step(7, "echo GOOD && submit"),
        ]
        for i, (s, t) in enumerate(script):
            judge.on_step(s, t, submitted=i == len(script) - 1)
        # the loop never waits for the judge: every judgment is still to run when on_step returns
        assert [j.status for j in judge.judgments.values()].count("pending") == 6
        await asyncio.wait([t for i, t in judge.tasks.items() if i != 6])  # all but the slow judge answer
        result = await judge.finish(timeout=0.5)  # then the episode ends: the slow one times out
        await client.aclose()
        server._server.force_exit = True  # do not wait for the abandoned slow replies
    by_step = {j.step: j for j in result.steps}
    assert [j.step for j in result.steps] == list(range(8))
    assert (by_step[0].status, by_step[0].score, len(by_step[0].votes)) == ("scored", 1.0, 3)
    assert (by_step[1].status, by_step[1].score, by_step[1].invalid_votes) == (
        "scored",
        0.0,
        1,
    )  # (+1 - 1) / 2
    assert sorted(str(v.score) for v in by_step[1].votes) == ["-1", "1", "None"]
    assert by_step[1].votes[[v.score for v in by_step[1].votes].index(None)].text == "I cannot decide."
    assert by_step[2].status == "skipped" and "nothing executed" in by_step[2].reason
    assert (by_step[3].status, by_step[3].score) == ("scored", -1.0)
    assert (by_step[4].status, by_step[4].score, by_step[4].invalid_votes) == ("invalid", None, 3)
    assert by_step[5].status == "failed" and "HTTP 500" in by_step[5].reason and by_step[5].score is None
    assert by_step[6].status == "timeout" and by_step[6].score is None
    assert (by_step[7].status, by_step[7].reason) == ("skipped", "submit")
    assert result.mean == pytest.approx((1.0 + 0.0 - 1.0) / 3) and result.score_of(3) == -1.0
    assert (result.scored, result.missing, result.skipped, result.invalid_votes) == (3, 3, 2, 4)
    assert result.wait_seconds >= 0.45  # waited out its timeout for the slow judge (no upper bound: load)
    assert server.calls == 6 * 3  # every executed, non-submit step got m = 3 votes


async def test_prompt_has_the_issue_a_bounded_window_and_capped_parts():
    with FakeOpenAI([ChatReply("\\boxed{+1}")] * 50) as server:
        client = client_for(
            server,
            m=1,
            history_steps=2,
            issue_max_chars=200,
            history_max_chars=100,
            response_max_chars=300,
            observation_max_chars=400,
            temperature=0.3,
            max_tokens=77,
            model="prm-8b",
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        judge = StepJudge(client, issue="ISSUE-START " + "i" * 1000 + " ISSUE-END")
        for i in range(4):
            judge.on_step(
                *step(
                    i,
                    f"echo CMD{i}",
                    f"OUT{i}-START " + "o" * 2000 + f" OUT{i}-END",
                    response=f"RESP{i}-START " + "r" * 2000 + f" RESP{i}-END",
                ),
                submitted=False,
            )
        await judge.finish(timeout=10)
        await client.aclose()
    body = next(r for r in server.requests if "RESP3-START" in current(r))
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("prm-8b", 0.3, 77)
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and "n" not in body
    system, user = body["messages"]
    assert system["role"] == "system" and "\\boxed{+1}" in system["content"]
    prompt = user["content"]
    assert "ISSUE-START" in prompt and "ISSUE-END" in prompt and "i" * 300 not in prompt  # capped at 200
    assert "[1 earlier step(s) not shown]" in prompt
    assert "RESP0" not in prompt and "RESP1-START" in prompt and "RESP2-END" in prompt  # window of 2
    assert "r" * 101 not in prompt.split("<current_step")[0]  # earlier steps capped at 100
    now = current(body)
    assert "RESP3-START" in now and "RESP3-END" in now and "r" * 301 not in now and "OUT3-END" in now
    assert "o" * 401 not in now and "characters omitted" in now
    assert "thinking 3" not in now  # include_reasoning is off


async def test_thinking_is_shown_when_asked_and_the_submit_step_when_not_skipped():
    with FakeOpenAI([ChatReply("\\boxed{-1}")] * 10) as server:
        client = client_for(server, m=1, include_reasoning=True, skip_submit=False)
        judge = StepJudge(client, issue="bug")
        judge.on_step(*step(0, "echo COMPLETE && git diff"), submitted=True)
        result = await judge.finish(timeout=10)
        await client.aclose()
    assert "thinking 0" in current(server.requests[0]) and result.steps[0].score == -1.0


async def test_requests_to_the_judge_are_bounded_per_process():
    arrivals: list[float] = []

    def slow(body: dict) -> ChatReply:
        arrivals.append(time.monotonic())
        return ChatReply("\\boxed{+1}", delay=0.3)

    with FakeOpenAI([slow] * 20) as server:
        client = client_for(server, max_concurrent=2)
        judges = [
            StepJudge(client, issue="bug"),
            StepJudge(client, issue="other bug"),
        ]  # two episodes, one client
        for judge in judges:
            judge.on_step(*step(0, "ls"), submitted=False)
        results = await asyncio.gather(*(judge.finish(timeout=10) for judge in judges))
        await client.aclose()
    assert [r.mean for r in results] == [1.0, 1.0] and len(arrivals) == 6
    peak = max(sum(1 for b in arrivals if a <= b < a + 0.25) for a in arrivals)
    assert peak == 2


async def test_n_votes_in_one_request_and_the_api_key():
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"body": json.loads(request.content), "auth": request.headers.get("authorization")})
        choices = [
            {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
            for i, c in enumerate(["\\boxed{+1}", "\\boxed{-1}", "\\boxed{+1}"])
        ]
        return httpx.Response(200, json={"choices": choices})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = JudgeClient(
            PRMConfig(enable=True, url="http://judge/v1/", request_n=True, api_key="k"), http=http
        )
        judge = StepJudge(client, issue="bug")
        judge.on_step(*step(0, "ls"), submitted=False)
        result = await judge.finish(timeout=10)
    assert len(seen) == 1 and seen[0]["body"]["n"] == 3 and seen[0]["auth"] == "Bearer k"
    assert result.steps[0].score == pytest.approx(1 / 3) and len(result.steps[0].votes) == 3


async def test_unreachable_judge_and_cancel_never_raise():
    client = JudgeClient(PRMConfig(enable=True, url="http://127.0.0.1:9/v1", retries=1))
    judge = StepJudge(client, issue="bug")
    judge.on_step(*step(0, "ls"), submitted=False)
    result = await judge.finish(timeout=10)
    assert result.steps[0].status == "failed" and "ConnectError" in result.steps[0].reason

    with FakeOpenAI([ChatReply("\\boxed{+1}", delay=5)] * 3) as server:
        server_client = client_for(server)
        judge = StepJudge(server_client, issue="bug")
        judge.on_step(*step(0, "ls"), submitted=False)
        await asyncio.sleep(0.2)
        judge.cancel()
        result = await judge.finish(timeout=10)  # a cancelled judgment is not waited for: under 10 s
        assert result.steps[0].status == "cancelled" and result.wait_seconds < 10 and result.mean is None
        await server_client.aclose()
        server._server.force_exit = True  # do not wait for the abandoned slow replies
    await client.aclose()
