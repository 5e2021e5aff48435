"""The slime plugin end to end: a scripted SGLang router speaking /generate on ids, the real Qwen
tokenizer and chat template, a real pool over a real exec server, the fixture images, grading in a
fresh container. slime itself is not installed: samples are `CompatSample` (checked against the
pinned upstream fields in test_samples.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from agent_fixtures import FIXTURES_JSONL, leftover_containers

from swe_rl.policies.sglang_tokens import SGLangTokenConfig
from swe_rl.slime import e2e, runtime
from swe_rl.slime.e2e import generate
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.tasks.pass_rates import read_attempts
from swe_rl.testing.fake_sglang import IM_END, FakeSGLang, TokenReply

TOOLZ = "pytoolz__toolz-9001"
SERVER_ABORTS = SGLangTokenConfig.model_fields["abort_retries"].default + 1
"""Aborts in a row that end a turn while slime is not aborting (each one before is sent again)."""
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
FIX = (
    "sed -i 's/iters = itertools.takewhile(predicate, iters)/"
    "iters = itertools.cycle(itertools.takewhile(predicate, iters))/' toolz/itertoolz.py"
)
SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "max_new_tokens": 256,
    "stop": None,
    "stop_token_ids": None,
    "skip_special_tokens": False,
    "no_stop_trim": True,
    "spaces_between_special_tokens": False,
}


def turn(reasoning: str, command: str, thought: str = "Next.") -> str:
    """A Qwen3 thinking turn in the bash-block format, as the model's text."""
    return f"<think>\n{reasoning}\n</think>\n\n{thought}\n\n```bash\n{command}\n```"


def rows() -> dict[str, dict]:
    return {r["instance_id"]: r for r in map(json.loads, FIXTURES_JSONL.read_text().splitlines())}


def new_sample(instance_id: str = TOOLZ, group: int = 3, index: int = 7, **instance_updates) -> Sample:
    row = {**rows()[instance_id], **instance_updates}
    return Sample(
        group_index=group,
        index=index,
        prompt=row["problem_statement"],
        label=None,
        metadata={"instance": row, "data_source": "swe-rl-fixtures"},
    )


def traj_dir(tmp_path: Path) -> Path:
    dirs = sorted((tmp_path / "rollouts").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


async def test_whole_trajectory_is_token_exact_and_resolved(
    plugin_env, qwen_tokenizer, codec, pool, docker_client, tmp_path
):
    script = [
        turn("Find interleave.", "grep -n 'takewhile' toolz/itertoolz.py"),
        turn("Keep cycling.", FIX, "Fix it."),
        turn("Done.", SUBMIT, "Submit."),
    ]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(
            sglang,
            dynamic_history=False,
            attempts_file=str(tmp_path / "attempts.jsonl"),
            policy_version="step-7",
        )
        sample = await generate(args, new_sample(), dict(SAMPLING))
    assert isinstance(sample, Sample)
    # the graded trajectory is one attempt for pass rates (swe_rl.tasks.pass_rates)
    (attempt,) = read_attempts(tmp_path / "attempts.jsonl")
    assert (attempt.instance_id, attempt.resolved, attempt.policy_version, attempt.source) == (
        TOOLZ,
        True,
        "step-7",
        "train",
    )
    assert sample.metadata["swe"]["status"] == "resolved", sample.metadata["swe"]
    assert sample.status is Sample.Status.COMPLETED and not sample.remove_sample

    # shapes: masks and log-probs cover the response; the response is the tail of tokens
    n = sample.response_length
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == n > 0
    assert sample.tokens[-n:] == sample.tokens[len(sample.tokens) - n :]
    prompt = sample.tokens[:-n]
    assert sglang.requests[0]["input_ids"] == prompt
    # every call's input is a prefix of the sample; the sampled ids follow it verbatim, mask 1 + their log-probs
    for request, out in zip(sglang.requests, sglang.outputs):
        ctx = request["input_ids"]
        assert sample.tokens[: len(ctx)] == ctx
        assert sample.tokens[len(ctx) : len(ctx) + len(out.ids)] == out.ids
        off = len(ctx) - len(prompt)
        assert sample.loss_mask[off : off + len(out.ids)] == [1] * len(out.ids)
        assert sample.rollout_log_probs[off : off + len(out.ids)] == out.logprobs
        assert request["return_logprob"] is True and request["sampling_params"]["temperature"] == 1.0
    assert sum(sample.loss_mask) == sum(len(o.ids) for o in sglang.outputs)
    assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask) if m == 0)

    # decoding the tokens gives the chat template's rendering of the agent's conversation, thinking kept
    saved = traj_dir(tmp_path)
    assert saved.name.startswith(f"{TOOLZ}__g3__i7__")
    traj = json.loads((saved / "traj.json").read_text())
    assert traj["messages"][2]["reasoning_content"] == "Find interleave."
    assert qwen_tokenizer.decode(sample.tokens) + "\n" == codec.render(traj["messages"])
    assert sample.response == qwen_tokenizer.decode(sample.tokens[-n:])
    assert "itertools.cycle" in (saved / "patch.diff").read_text()
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["tokens"]["turns"] == 3 and meta["prefix_breaks"] == 0 and meta["group_index"] == 3

    reward = await reward_func(SimpleNamespace(), sample)
    assert reward == {
        "score": 1.0,
        "acc": 1.0,
        "status": "resolved",
        "resolved": True,
        "removed": False,
        "exit_reason": "submitted",
    }
    assert not leftover_containers(docker_client, pool)


async def test_turn_samples_give_one_sample_per_turn_on_the_context_it_saw(
    plugin_env, qwen_tokenizer, pool, docker_client
):
    script = [turn("Look.", "ls"), "no block here, just rambling", turn("Give up.", SUBMIT, "Submit.")]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        parent = new_sample(group=5, index=11)
        parent.session_id = "sess-1"
        samples = await generate(plugin_env(sglang, samples="turn"), parent, dict(SAMPLING))
    assert isinstance(samples, list) and len(samples) == 3
    for s, request, out in zip(samples, sglang.requests, sglang.outputs):
        assert s.tokens == request["input_ids"] + out.ids  # exactly what the model saw, then what it sampled
        assert s.response_length == len(out.ids) == len(s.loss_mask) == len(s.rollout_log_probs)
        assert s.loss_mask == [1] * len(out.ids) and s.rollout_log_probs == out.logprobs
        assert (s.group_index, s.index, s.rollout_id, s.session_id) == (5, 11, 11, "sess-1")
        assert s.status is Sample.Status.COMPLETED
    assert [s.metadata["swe_step"]["turn"] for s in samples] == [0, 1, 2]
    assert "could not be run" in qwen_tokenizer.decode(
        samples[2].tokens
    )  # the format-error feedback was seen

    rewards = await reward_func(SimpleNamespace(), samples)
    assert [r["score"] for r in rewards] == [-1.0] * 3 and {r["status"] for r in rewards} == {"no_patch"}
    assert not leftover_containers(docker_client, pool)


async def test_context_management_starts_new_segments_the_training_sees_too(
    plugin_env, qwen_tokenizer, codec
):
    noisy = "seq 1 30 | sed 's/$/ lorem ipsum/'"
    script = [turn(f"Step {i}.", noisy) for i in range(8)] + [turn("Stop.", SUBMIT)]
    limit, max_new = 1800, 128
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, context=limit, step_limit=12, samples="turn", context_low_water=1.0)
        samples = await generate(args, new_sample(), {**SAMPLING, "max_new_tokens": max_new})
    assert len(samples) == 9
    segments = [s.metadata["swe_step"]["segment"] for s in samples]
    assert segments[0] == 0 and segments[-1] >= 1 and segments == sorted(segments)
    for s, request, out in zip(samples, sglang.requests, sglang.outputs):
        assert len(request["input_ids"]) <= limit - max_new
        assert s.tokens == request["input_ids"] + out.ids and len(s.tokens) <= limit
    compacted = qwen_tokenizer.decode(sglang.requests[-1]["input_ids"])
    # head (the problem and first turns) + marker + tail (newest turns), thinking kept in both
    assert "earlier turn(s) omitted to fit the context window" in compacted
    assert "Step 0." in compacted and "Step 7." in compacted
    assert any(f"Step {i}." not in compacted for i in range(1, 7))
    info = samples[0].metadata["swe"]
    assert info["tokens"]["segments"] >= 2 and info["prefix_breaks"] == 0


async def test_without_dynamic_history_a_full_context_truncates_and_is_still_graded(
    plugin_env, qwen_tokenizer
):
    script = [turn(f"Step {i}.", "seq 1 80") for i in range(8)]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, context=1400, dynamic_history=False)
        sample = await generate(args, new_sample(), {**SAMPLING, "max_new_tokens": 128})
    assert sample.status is Sample.Status.TRUNCATED
    assert sample.metadata["swe"]["stop_reason"] == "context_exhausted"
    assert len(sample.tokens) <= 1400 and sample.metadata["swe"]["status"] == "no_patch"
    last = sglang.outputs[-1].ids
    assert sample.tokens[-len(last) :] == last  # ends with the last sampled turn, no dangling observation
    assert (await reward_func(SimpleNamespace(), sample))["score"] == -1.0


async def test_a_turn_cut_at_max_new_tokens_is_truncated(plugin_env, qwen_tokenizer):
    script = [turn("A very long plan " * 30, "ls"), turn("Submit.", SUBMIT)]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, samples="turn")
        samples = await generate(args, new_sample(), {**SAMPLING, "max_new_tokens": 40})
    assert sglang.outputs[0].finish_reason == "length" and len(sglang.outputs[0].ids) == 40
    assert samples[0].status is Sample.Status.TRUNCATED and samples[1].status is Sample.Status.COMPLETED
    # the cut turn was closed (<|im_end|>) by the observation, masked out
    assert qwen_tokenizer.decode(sglang.requests[1]["input_ids"][len(samples[0].tokens) :]).startswith(
        "<|im_end|>\n<|im_start|>user\n"
    )


async def test_slime_abort_returns_aborted_without_grading(
    plugin_env, qwen_tokenizer, pool, docker_client, tmp_path, monkeypatch
):
    def slime_aborts(body):
        monkeypatch.setattr(runtime, "slime_aborting", lambda args: True)  # GenerateState(args).aborted
        return TokenReply(finish_reason="abort", ids=[])

    with FakeSGLang(qwen_tokenizer, [turn("Look.", "ls"), slime_aborts]) as sglang:
        samples = await generate(plugin_env(sglang), new_sample(), dict(SAMPLING))
    assert [s.status for s in samples] == [
        Sample.Status.ABORTED
    ]  # the turn it played, in the process's shape
    assert samples[0].metadata["swe"]["aborted"] and not (tmp_path / "rollouts").exists()
    assert samples[0].reward is None and samples[0].loss_mask == [1] * samples[0].response_length
    assert not leftover_containers(docker_client, pool)


async def test_slime_abort_stops_before_the_next_request(
    plugin_env, qwen_tokenizer, pool, docker_client, monkeypatch
):
    calls = []

    def first_then_abort(body):
        calls.append(1)
        monkeypatch.setattr(runtime, "slime_aborting", lambda args: True)  # slime aborts meanwhile
        return TokenReply(text=turn("Look.", "ls"))

    with FakeSGLang(qwen_tokenizer, [first_then_abort, turn("More.", "ls")]) as sglang:
        samples = await generate(plugin_env(sglang), new_sample(), dict(SAMPLING))
    assert len(sglang.requests) == 1 and [s.status for s in samples] == [Sample.Status.ABORTED]
    assert not leftover_containers(docker_client, pool)


async def test_an_abort_slime_did_not_ask_for_is_removed(
    plugin_env, qwen_tokenizer, codec, pool, docker_client, caplog
):
    # e.g. the router restarted: slime is not aborting, so the rollout is an infrastructure failure
    with FakeSGLang(
        qwen_tokenizer, [turn("Look.", "ls"), *[TokenReply(finish_reason="abort", ids=[])] * SERVER_ABORTS]
    ) as sglang:
        samples = await generate(plugin_env(sglang), new_sample(index=9), dict(SAMPLING))
    (s,) = samples
    assert s.remove_sample and s.status is Sample.Status.FAILED and s.rollout_id == 9
    assert s.tokens == list(codec.header_ids) + [IM_END] and s.loss_mask == [0] and s.response_length == 1
    assert s.metadata["swe"]["removed_reason"].startswith("server_abort")
    assert s.reward == {
        "score": 0.0,
        "acc": 0.0,
        "status": "env_error",
        "resolved": False,
        "removed": True,
        "exit_reason": s.metadata["swe"]["exit_reason"],
    }  # preset: slime never sees None
    assert "removing rollout of pytoolz__toolz-9001" in caplog.text and "server_abort" in caplog.text
    assert not leftover_containers(docker_client, pool)


async def test_missing_image_is_removed_not_punished(plugin_env, qwen_tokenizer, caplog, tmp_path):
    attempts = tmp_path / "attempts.jsonl"
    with FakeSGLang(qwen_tokenizer, [turn("Look.", "ls")]) as sglang:
        samples = await generate(
            plugin_env(sglang, attempts_file=str(attempts)),
            new_sample(image_name="swe-rl/no-such-image:latest"),
            dict(SAMPLING),
        )
    assert not attempts.exists()  # a fleet failure says nothing of the policy: no attempt
    (s,) = samples
    assert s.remove_sample and s.status is Sample.Status.FAILED
    assert set(s.loss_mask) == {0} and len(s.loss_mask) == s.response_length == len(s.rollout_log_probs) == 1
    assert s.metadata["swe"]["removed_reason"].startswith("env_error") and not sglang.requests
    assert "removing rollout of pytoolz__toolz-9001" in caplog.text
    reward = await reward_func(SimpleNamespace(), samples)
    assert reward[0]["score"] == 0.0 and reward[0]["removed"]


async def test_unreachable_fleet_is_removed(plugin_env, qwen_tokenizer, monkeypatch):
    monkeypatch.setenv("SWE_POOL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SWE_CLIENT_ALLOCATE_DEADLINE", "2")
    with FakeSGLang(qwen_tokenizer, [turn("Look.", "ls")]) as sglang:
        (s,) = await generate(plugin_env(sglang), new_sample(), dict(SAMPLING))
    assert s.remove_sample and s.metadata["swe"]["removed_reason"].startswith("env_error")


async def test_unreachable_router_is_removed(plugin_env, qwen_tokenizer, pool, docker_client):
    with FakeSGLang(qwen_tokenizer, []) as sglang:
        args = plugin_env(sglang, generate_retries=0)
    (s,) = await generate(args, new_sample(), dict(SAMPLING))  # the router is gone now
    assert s.remove_sample and s.metadata["swe"]["removed_reason"].startswith("policy_server")
    assert not leftover_containers(docker_client, pool)


async def test_bad_row_is_removed_without_touching_the_fleet(plugin_env, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, []) as sglang:
        bad = Sample(index=1, prompt="?", metadata={"instance": {"repo": "x/y"}})
        (s,) = await generate(plugin_env(sglang), bad, dict(SAMPLING))
    assert s.remove_sample and s.metadata["swe"]["removed_reason"].startswith("bad_instance")


async def test_rollout_timeout_removes_the_sample_and_releases_the_container(
    plugin_env, qwen_tokenizer, pool, docker_client
):
    with FakeSGLang(qwen_tokenizer, [TokenReply(text=turn("Slow.", "ls"), delay=6)]) as sglang:
        (s,) = await generate(plugin_env(sglang, rollout_timeout=3), new_sample(), dict(SAMPLING))
    assert s.remove_sample and s.metadata["swe"]["removed_reason"].startswith("rollout_timeout")
    await asyncio.sleep(0.5)
    assert not leftover_containers(docker_client, pool)


async def test_cancelled_rollout_releases_its_container(plugin_env, qwen_tokenizer, pool, docker_client):
    with FakeSGLang(qwen_tokenizer, [TokenReply(text=turn("Slow.", "ls"), delay=8)]) as sglang:
        task = asyncio.create_task(generate(plugin_env(sglang), new_sample(), dict(SAMPLING)))
        for _ in range(200):
            if sglang.requests:
                break
            await asyncio.sleep(0.1)
        assert sglang.requests and leftover_containers(docker_client, pool)  # the container is up
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for _ in range(50):
        if not leftover_containers(docker_client, pool):
            break
        await asyncio.sleep(0.2)
    assert not leftover_containers(docker_client, pool)


async def test_semaphore_bounds_concurrent_rollouts(plugin_env, qwen_tokenizer, monkeypatch):
    monkeypatch.setenv("SWE_MAX_CONCURRENT", "1")
    active, peak = 0, 0

    def scripted(body: dict) -> TokenReply:
        return TokenReply(text=turn("Submit.", SUBMIT))

    real_play = e2e._play

    async def counting_play(*a, **kw):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await real_play(*a, **kw)
        finally:
            active -= 1

    monkeypatch.setattr(e2e, "_play", counting_play)
    with FakeSGLang(qwen_tokenizer, [scripted, scripted]) as sglang:
        args = plugin_env(sglang)
        results = await asyncio.gather(
            generate(args, new_sample(index=1), dict(SAMPLING)),
            generate(args, new_sample(index=2), dict(SAMPLING)),
        )
    assert peak == 1 and [r[0].index for r in results] == [1, 2]


async def test_evaluation_returns_one_graded_sample(plugin_env, qwen_tokenizer):
    # slime's eval rollouts pass evaluation=True and expect one sample per prompt, whatever dynamic_history says
    script = [turn("Keep cycling.", FIX, "Fix it."), turn("Done.", SUBMIT, "Submit.")]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        sample = await generate(plugin_env(sglang), new_sample(), dict(SAMPLING), evaluation=True)
    assert isinstance(sample, Sample) and sample.metadata["swe"]["resolved"]
    assert (await reward_func(SimpleNamespace(), sample))["score"] == 1.0
