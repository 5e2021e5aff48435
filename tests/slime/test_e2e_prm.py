"""PRM step rewards through the slime plugin's `generate` and `reward_func`, on the real fleet: a scripted
SGLang router plays the policy, a scripted OpenAI-compatible server on loopback plays the judge and
decides its votes by the step it is shown."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import pytest
from agent_fixtures import leftover_containers
from judge_fixtures import current, scripted_judge
from test_e2e import FIX, SAMPLING, SUBMIT, new_sample, turn

from swe_rl.slime.e2e import generate
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_openai import ChatReply as Judged
from swe_rl.testing.fake_openai import FakeOpenAI
from swe_rl.testing.fake_sglang import FakeSGLang

GREP = "grep -n 'takewhile' toolz/itertoolz.py"
SLOW_JUDGE = 3600.0
"""The slow judge's delay: its reply never comes within a rollout, however loaded the machine."""


def prm(server: FakeOpenAI, **overrides) -> dict:
    return {
        "enable": True,
        "url": server.base_url,
        "retries": 0,
        "step_coef": 0.5,
        "api_key": "sk-judge",
        **overrides,
    }


def by_turn(qwen_tokenizer, script: list[str]):
    """A policy reply chosen by how many assistant turns the context has (rollouts may interleave)."""

    def reply(body: dict) -> str:
        return script[qwen_tokenizer.decode(body["input_ids"]).count("<|im_start|>assistant") - 1]

    return reply


async def test_step_samples_get_the_outcome_plus_their_own_step_score(
    plugin_env, qwen_tokenizer, pool, docker_client, tmp_path
):
    arrivals: list[float] = []
    votes = scripted_judge(
        **{
            "itertools.cycle": Judged("The fix. \\boxed{+1}"),
            "takewhile": [Judged("\\boxed{+1}"), Judged("\\boxed{-1}"), Judged("no idea")],
        }
    )

    def judge(body: dict) -> Judged:
        arrivals.append(time.monotonic())
        answer = votes(body)
        answer.delay = 0.3
        return answer

    script = [
        turn("Find interleave.", GREP),
        turn("Keep cycling.", FIX, "Fix it."),
        turn("Done.", SUBMIT, "Submit."),
    ]
    policy = by_turn(qwen_tokenizer, script)
    with (
        FakeSGLang(qwen_tokenizer, [policy] * 6) as sglang,
        FakeOpenAI([judge] * 12, api_key="sk-judge") as server,
    ):
        # the default swe_samples: segment; with the PRM on the run trains one sample per turn
        args = plugin_env(sglang, prm=prm(server, max_concurrent=2))
        results = await asyncio.gather(
            generate(args, new_sample(index=1), dict(SAMPLING)),
            generate(args, new_sample(index=2), dict(SAMPLING)),
        )
    for samples in results:  # two rollouts at once, each with its own steps' scores
        assert [s.metadata["swe"]["status"] for s in samples] == ["resolved"] * 3
        assert [s.metadata["swe_step"]["prm_score"] for s in samples] == [
            0.0,
            1.0,
            None,
        ]  # (+1 -1)/2, +1, skipped
        assert [s.metadata["swe_step"]["prm_status"] for s in samples] == ["scored", "scored", "skipped"]
        rewards = await reward_func(SimpleNamespace(swe_prm=prm(server)), samples)
        assert [r["score"] for r in rewards] == [1.0, 1.5, 1.0] and {r["outcome"] for r in rewards} == {1.0}
        assert [r["prm_score"] for r in rewards] == [0.0, 1.0, None]
        info = samples[0].metadata["swe"]["prm"]
        assert (info["scored"], info["skipped"], info["invalid_votes"], info["mean"]) == (2, 1, 1, 0.5)
        assert "no idea" in [v["text"] for v in info["steps"][0]["votes"]]
    # 2 rollouts x 2 judged steps x 3 votes, at most 2 requests in flight in the process
    assert (
        len(server.requests) == 12
        and max(sum(1 for b in arrivals if a <= b < a + 0.25) for a in arrivals) == 2
    )
    fix_prompt = next(r for r in server.requests if "itertools.cycle" in current(r))["messages"][1]["content"]
    assert (
        "interleave" in fix_prompt.split("</issue>")[0].lower()
        and GREP in fix_prompt.split("<current_step")[0]
    )

    dirs = sorted((tmp_path / "rollouts").iterdir())
    traj = json.loads((dirs[0] / "traj.json").read_text())
    assert [s["status"] for s in traj["prm"]["steps"]] == ["scored", "scored", "skipped"]
    assert all(v["text"] for v in traj["prm"]["steps"][1]["votes"])
    meta = (dirs[0] / "meta.json").read_text()
    assert '"prm"' in meta and "sk-judge" not in meta
    assert not leftover_containers(docker_client, pool)


async def test_failing_invalid_and_slow_judges_never_fail_the_rollout(
    plugin_env, qwen_tokenizer, pool, docker_client
):
    judge = scripted_judge(
        **{
            "seq 1 3": Judged("judge overloaded", status=500),
            "wc -l": Judged("I would rather not say."),
            # far beyond the rollout: a judge that has not answered by the episode's end
            "itertools.cycle": Judged("\\boxed{-1}", delay=SLOW_JUDGE),
            "head -1": Judged("\\boxed{+1}"),
        }
    )
    script = [
        turn("Look.", "seq 1 3"),
        turn("Count.", "wc -l toolz/itertoolz.py"),
        turn("Fix.", FIX),
        turn("Check.", "head -1 toolz/itertoolz.py"),
        turn("Done.", SUBMIT),
    ]
    with FakeSGLang(qwen_tokenizer, script) as sglang, FakeOpenAI([judge] * 20, api_key="sk-judge") as server:
        args = plugin_env(sglang, dynamic_history=False, prm=prm(server, finish_timeout=0.5))
        started = time.monotonic()
        sample = await generate(args, new_sample(), dict(SAMPLING))
        # the slow judge did not hold the rollout: a bound far below its delay, far above a loaded run
        assert time.monotonic() - started < SLOW_JUDGE / 6
        server._server.force_exit = True  # do not wait for the abandoned slow replies
    assert (
        isinstance(sample, Sample) and not sample.remove_sample and sample.status is Sample.Status.COMPLETED
    )
    info = sample.metadata["swe"]
    assert info["resolved"]
    steps = info["prm"]["steps"]
    assert [s["status"] for s in steps] == ["failed", "invalid", "timeout", "scored", "skipped"]
    assert "HTTP 500" in steps[0]["reason"] and steps[1]["invalid_votes"] == 3 and steps[2]["score"] is None
    assert info["prm"]["mean"] == 1.0 and (info["prm"]["missing"], info["prm"]["scored"]) == (3, 1)
    reward = await reward_func(SimpleNamespace(swe_prm=prm(server)), sample)
    assert (
        reward["score"] == 1.5 and reward["outcome"] == 1.0 and reward["prm_score"] == 1.0
    )  # 1 + 0.5 x mean
    assert not leftover_containers(docker_client, pool)


@pytest.mark.parametrize("evaluation", [True, False])
async def test_no_judge_in_evaluation_and_when_disabled(plugin_env, qwen_tokenizer, evaluation):
    with (
        FakeSGLang(qwen_tokenizer, [turn("Fix.", FIX), turn("Done.", SUBMIT)]) as sglang,
        FakeOpenAI([]) as server,
    ):
        settings = prm(server) if evaluation else {"enable": False, "url": server.base_url}
        sample = await generate(
            plugin_env(sglang, dynamic_history=False, prm=settings),
            new_sample(),
            dict(SAMPLING),
            evaluation=evaluation,
        )
    assert not server.requests and "prm" not in sample.metadata["swe"]
    assert (await reward_func(SimpleNamespace(), sample))["score"] == 1.0
