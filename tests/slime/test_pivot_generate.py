"""Pivot mode round trip: an expert trajectory -> pivot rows (data/build_pivot_dataset.py) -> one scored
single-step rollout through the scripted SGLang /generate server with the real Qwen tokenizer and chat
template, via `swe_rl.slime.pivot.generate` and via the plugin's own entry point (same scripts, stage 1 or 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from swe_rl.policies.sglang_tokens import SGLangTokenConfig
from swe_rl.slime import e2e, pivot, reward, runtime
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_sglang import IM_END, FakeSGLang, TokenReply

ROOT = Path(__file__).resolve().parents[2]
SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "max_new_tokens": 256,
    "skip_special_tokens": False,
    "no_stop_trim": True,
}
EXPERT = {
    "instance_id": "pytoolz__toolz-9001",
    "status": "resolved",
    "resolved": True,
    "steps": [],
    "messages": [
        {"role": "system", "content": "You are an engineer. One ```bash block per answer."},
        {"role": "user", "content": "Fix interleave in toolz (repository at /testbed)."},
        {
            "role": "assistant",
            "content": "Search.\n\n```bash\ngrep -rn 'def interleave' toolz\n```",
            "reasoning_content": "Where is interleave defined?",
        },
        {
            "role": "user",
            "content": "<returncode>0</returncode>\n<output>\ntoolz/itertoolz.py:123:def interleave(seqs):\n</output>",
        },
        {
            "role": "assistant",
            "content": "Read it.\n\n```bash\nsed -n '120,140p' toolz/itertoolz.py\n```",
            "reasoning_content": "Read the function.",
        },
    ],
}
TOOL_ROW = {
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "str_replace_editor",
                "description": "edit",
                "parameters": {
                    "type": "object",
                    "required": ["command", "path"],
                    "properties": {"command": {"type": "string"}, "path": {"type": "string"}},
                },
            },
        }
    ],
    "messages": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Look at a.py"},
    ],
    "expected_action": {
        "tool": "str_replace_editor",
        "arguments": {"command": "view", "path": "/testbed/a.py"},
    },
    "harness": "tool_call",
    "instance_id": "demo__demo-1",
    "step_index": 0,
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    """Pivot rows built from a traj.json by the dataset tool, as users do."""
    tmp = tmp_path_factory.mktemp("pivots")
    (tmp / "run" / "x").mkdir(parents=True)
    (tmp / "run" / "x" / "traj.json").write_text(json.dumps(EXPERT))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "data" / "build_pivot_dataset.py"),
            str(tmp / "run"),
            "--output-dir",
            str(tmp / "out"),
            "--val-size",
            "0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in (tmp / "out" / "train.jsonl").read_text().splitlines()]


@pytest.fixture
async def make_args(qwen_tokenizer_dir):
    def make(sglang: FakeSGLang, **swe) -> SimpleNamespace:
        swe.setdefault("dynamic_history", False)  # one Sample back; the list shape has its own tests
        return SimpleNamespace(
            sglang_router_ip="127.0.0.1",
            sglang_router_port=sglang.port,
            hf_checkpoint=str(qwen_tokenizer_dir),
            rollout_max_context_len=swe.pop("context", None),
            reward_key="score",
            **{f"swe_{k}": v for k, v in swe.items()},
        )

    yield make
    await pivot.shutdown()


def sample_of(row: dict, index: int = 0) -> Sample:
    return Sample(
        group_index=0, index=index, prompt=row["text"], metadata=json.loads(json.dumps(row["metadata"]))
    )


def turn(reasoning: str, command: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n\nNext.\n\n```bash\n{command}\n```"


@pytest.mark.slow  # a scripted SGLang server and the real tokenizer through slime's generate: seconds
async def test_round_trip_is_token_exact_and_scored(rows, make_args, qwen_tokenizer, codec):
    row = rows[1]  # the second decision point: context = system, user, turn 0 (with thinking), observation
    with FakeSGLang(
        qwen_tokenizer, [turn("Look at it.", 'sed -n "120,140p" /testbed/toolz/itertoolz.py')]
    ) as sglang:
        sample = await pivot.generate(make_args(sglang), sample_of(row), dict(SAMPLING))
    (request,) = sglang.requests
    (out,) = sglang.outputs
    # the prompt is the chat template's rendering of the context, thinking of the earlier turn kept
    context = row["metadata"]["pivot"]["messages"]
    assert request["input_ids"] == codec.prompt_ids(context)
    assert "<think>\nWhere is interleave defined?\n</think>" in qwen_tokenizer.decode(request["input_ids"])
    assert request["return_logprob"] is True and request["sampling_params"]["temperature"] == 1.0
    # token-exact: prompt ids, then exactly the sampled ids with their log-probs
    assert sample.tokens == request["input_ids"] + out.ids
    assert sample.response_length == len(out.ids) == len(sample.loss_mask) == len(sample.rollout_log_probs)
    assert sample.loss_mask == [1] * len(out.ids) and sample.rollout_log_probs == out.logprobs
    assert sample.response == qwen_tokenizer.decode(out.ids) and sample.status is Sample.Status.COMPLETED
    # scored: the same command spelt differently (quotes, workdir path) matches the expert's
    assert sample.reward == {"score": 1.0, "acc": 1.0, "category": "match", "removed": False}
    result = sample.metadata["pivot_result"]
    assert result["category"] == "match" and result["step_index"] == 1 and result["finish_reason"] == "stop"
    assert result["details"]["policy_action"] == {
        "tool": "bash",
        "arguments": {"command": 'sed -n "120,140p" /testbed/toolz/itertoolz.py'},
    }
    assert await reward.reward_func(SimpleNamespace(), sample) == sample.reward


async def test_the_plugin_entry_point_dispatches_pivot_rows(rows, make_args, qwen_tokenizer):
    script = [turn("Search.", "grep -rn interleave toolz"), "I am not sure what to do."]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = make_args(sglang)
        mismatch = await e2e.generate(args, sample_of(rows[0], 0), dict(SAMPLING))
        no_action = await e2e.generate(args, sample_of(rows[0], 1), dict(SAMPLING))
    assert isinstance(mismatch, Sample) and mismatch.metadata["pivot_result"]["category"] == "mismatch"
    assert no_action.metadata["pivot_result"]["category"] == "no_action"
    rewards = await reward.reward_func(args, [mismatch, no_action])
    assert [r["score"] for r in rewards] == [0.0, 0.0] and [r["category"] for r in rewards] == [
        "mismatch",
        "no_action",
    ]


async def test_reward_func_scores_samples_from_another_generate(rows):
    # e.g. slime's default generate on the same rows: the response text is parsed and scored
    s = sample_of(rows[0])
    s.response = 'Search.\n\n```bash\ngrep -rn "def interleave" ./toolz\n```'
    assert (await reward.reward_func(SimpleNamespace(), s))["category"] == "match"
    s.response = "```bash\nls\n```"
    assert (await reward.reward_func(SimpleNamespace(), s))["score"] == 0.0


async def test_tool_call_pivot_with_tools_in_the_prompt(make_args, qwen_tokenizer, codec):
    row = {"text": "Look at a.py", "metadata": {"pivot": TOOL_ROW, "data_source": "pivot"}}
    call = '<tool_call>\n{"name": "str_replace_editor", "arguments": {"command": "view", "path": "a.py"}}\n</tool_call>'
    with FakeSGLang(qwen_tokenizer, [f"<think>\nView it.\n</think>\n\n{call}"]) as sglang:
        sample = await pivot.generate(
            make_args(sglang, pivot={"partial_credit": 0.5}), sample_of(row), dict(SAMPLING)
        )
    prompt = qwen_tokenizer.decode(sglang.requests[0]["input_ids"])
    assert (
        "<tools>" in prompt
        and '"name": "str_replace_editor"' in prompt
        and prompt.endswith("<|im_start|>assistant\n")
    )
    assert sample.reward["category"] == "match", sample.metadata["pivot_result"]


async def test_truncated_turn_scores_zero_and_is_marked(rows, make_args, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, [turn("A long plan " * 50, "grep -rn interleave toolz")]) as sglang:
        sample = await pivot.generate(
            make_args(sglang), sample_of(rows[0]), {**SAMPLING, "max_new_tokens": 30}
        )
    assert sample.status is Sample.Status.TRUNCATED and sample.response_length == 30
    assert sample.reward["score"] == 0.0 and sample.reward["category"] == "no_action"


SERVER_ABORTS = SGLangTokenConfig.model_fields["abort_retries"].default + 1
"""Aborts in a row that end a turn when slime is not aborting (each one before is sent again)."""


async def test_removed_and_aborted_samples(rows, make_args, qwen_tokenizer, codec, monkeypatch):
    with FakeSGLang(
        qwen_tokenizer, [TokenReply(finish_reason="abort", ids=[]) for _ in range(SERVER_ABORTS)]
    ) as sglang:
        args = make_args(sglang)
        server_abort = await pivot.generate(args, sample_of(rows[0]), dict(SAMPLING))  # slime is not aborting
        monkeypatch.setattr(runtime, "slime_aborting", lambda args: True)
        aborted = await pivot.generate(args, sample_of(rows[0]), dict(SAMPLING))
        monkeypatch.undo()
        bad = Sample(index=3, metadata={"pivot": {"messages": [], "expected_action": {"command": "ls"}}})
        bad = await pivot.generate(args, bad, dict(SAMPLING))
        long = await pivot.generate(make_args(sglang, context=20), sample_of(rows[0]), dict(SAMPLING))
    assert aborted.status is Sample.Status.ABORTED and aborted.reward is None
    header = list(codec.header_ids)
    for s, reason in ((bad, "bad_pivot"), (long, "context_too_long"), (server_abort, "server_abort")):
        assert s.remove_sample and s.status is Sample.Status.FAILED, s.metadata
        assert s.metadata["pivot_result"]["removed_reason"].startswith(reason)
        # minimal: a few prompt ids (never empty, never the whole long prompt), one end-of-turn id, mask 0
        assert s.tokens == header + [IM_END] and s.response_length == 1 and s.loss_mask == [0]
        assert s.rollout_log_probs == [0.0]
        assert s.reward == {"score": 0.0, "acc": 0.0, "category": "removed", "removed": True}
    with FakeSGLang(qwen_tokenizer, []) as sglang:
        args = make_args(sglang, generate_retries=0)
    gone = await pivot.generate(args, sample_of(rows[0]), dict(SAMPLING))  # the router is gone now
    assert gone.remove_sample and gone.metadata["pivot_result"]["removed_reason"].startswith("policy_server")


async def test_dynamic_history_returns_a_list_of_one_like_end_to_end_rows(
    rows, make_args, qwen_tokenizer, codec
):
    # one shape per process: a dataset mixing pivot and end-to-end rows flattens (upstream checks data[0] only)
    with FakeSGLang(
        qwen_tokenizer, [turn("Read.", "sed -n '120,140p' toolz/itertoolz.py"), "no action"]
    ) as sglang:
        args = make_args(sglang, dynamic_history=True)
        args.router_policy, parent = "consistent_hashing", sample_of(rows[0], 4)
        parent.session_id = "sess-9"
        (s,) = await pivot.generate(args, parent, dict(SAMPLING))
        bad = Sample(index=5, metadata={"pivot": {"messages": [], "expected_action": {"command": "ls"}}})
        (removed,) = await e2e.generate(args, bad, dict(SAMPLING))
        evaluated = await pivot.generate(args, sample_of(rows[0], 6), dict(SAMPLING), evaluation=True)
    assert s.rollout_id == 4 and s.reward is not None and s.loss_mask == [1] * s.response_length > []
    assert sglang.headers[0]["x-smg-routing-key"] == "sess-9"
    assert (
        removed.remove_sample
        and removed.rollout_id == 5
        and removed.tokens == list(codec.header_ids) + [IM_END]
    )
    assert isinstance(evaluated, Sample)  # slime's eval rollouts want one sample


async def test_options_that_break_with_list_returns_fail_fast(rows, make_args, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, []) as sglang:
        for flag, attr in (("--group-rm", "group_rm"), ("--partial-rollout", "partial_rollout")):
            args = make_args(sglang, dynamic_history=True)
            setattr(args, attr, True)
            with pytest.raises(ValueError, match=flag):
                await pivot.generate(args, sample_of(rows[0]), dict(SAMPLING))
    assert not sglang.requests


async def test_pivot_sample_carries_routing_top_p_and_counts_of_its_call(make_args, qwen_tokenizer):
    """Stage 1 under ``--use-rollout-routing-replay`` and ``--rollout-top-p 0.95`` (slime's own path's fields)."""
    from replay_episode import MOE, RestatedSample, replay_view, slime_args, slime_path

    row = {"text": "Look at a.py", "metadata": {"pivot": TOOL_ROW, "data_source": "pivot"}}
    call = '<tool_call>\n{"name": "str_replace_editor", "arguments": {"command": "view", "path": "a.py"}}\n</tool_call>'
    params = {**SAMPLING, "top_p": 0.95, "custom_params": {"return_top_p_token_ids": True}}
    with FakeSGLang(
        qwen_tokenizer, [f"<think>\nView it.\n</think>\n\n{call}"], moe=MOE, speculative=True
    ) as sglang:
        args = make_args(sglang)
        vars(args).update(vars(slime_args()))
        sample = await pivot.generate(args, sample_of(row), params)
    assert sglang.requests[0]["return_routed_experts"] is True
    reference = slime_path(
        RestatedSample, slime_args(), [(sglang.requests[0]["input_ids"], sglang.answers[0])]
    )
    view = replay_view(sample)
    assert view["routed"] is not None and len(view["routed"]) == len(sample.tokens) - 1
    assert view == replay_view(reference)
