"""Tool-calling harnesses in whole rollouts: the slime plugin in token mode (a scripted SGLang router whose
model writes Hermes ``<tool_call>`` turns, the real Qwen tokenizer and chat template with the tools in the
prompt), harness mixing and the eval harness of the plugin, and chat mode through an OpenAI-compatible
server returning ``tool_calls``; a real pool over a real exec server and grading in a fresh container."""

from __future__ import annotations

import json
from types import SimpleNamespace

from agent_fixtures import FIXTURES_JSONL, leftover_containers

from swe_rl.agent import AgentConfig, ExitReason, run_instance
from swe_rl.grading import GradeStatus
from swe_rl.harnesses import CodeActHarness, CodexHarness
from swe_rl.harnesses.registry import choose_harness
from swe_rl.policies import OpenAIChatConfig, OpenAIChatPolicy
from swe_rl.slime import e2e
from swe_rl.slime.e2e import generate
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI
from swe_rl.testing.fake_sglang import FakeSGLang

TOOLZ = "pytoolz__toolz-9001"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
OLD = "            iters = itertools.takewhile(predicate, iters)"
NEW = "            iters = itertools.cycle(itertools.takewhile(predicate, iters))"
SAMPLING = {"temperature": 1.0, "max_new_tokens": 512}


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def thinking_turn(reasoning: str, thought: str, *calls: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n\n{thought}\n" + "\n".join(calls)


def new_sample(instance_id: str = TOOLZ) -> Sample:
    rows = {r["instance_id"]: r for r in map(json.loads, FIXTURES_JSONL.read_text().splitlines())}
    return Sample(
        group_index=1,
        index=2,
        prompt=rows[instance_id]["problem_statement"],
        label=None,
        metadata={"instance": rows[instance_id], "data_source": "swe-rl-fixtures"},
    )


def plugin_args(sglang, tokenizer_dir, **swe) -> SimpleNamespace:
    return SimpleNamespace(
        sglang_router_ip="127.0.0.1",
        sglang_router_port=sglang.port,
        hf_checkpoint=str(tokenizer_dir),
        rollout_max_context_len=None,
        reward_key="score",
        **{f"swe_{k}": v for k, v in swe.items()},
    )


async def test_token_mode_codex_rollout_is_token_exact_and_resolved(
    pool, fixture_instances, qwen_tokenizer, qwen_tokenizer_dir, codec, tmp_path, monkeypatch, docker_client
):
    for key, value in {
        "SWE_POOL_URL": pool.url,
        "SWE_POOL_TOKEN": pool.token,
        "SWE_CLIENT_BACKOFF": "0.1",
        "SWE_SAVE_TRAJ_DIR": str(tmp_path / "rollouts"),
    }.items():
        monkeypatch.setenv(key, value)
    patch = f"*** Begin Patch\n*** Update File: toolz/itertoolz.py\n@@\n-{OLD}\n+{NEW}\n*** End Patch"
    script = [
        thinking_turn(
            "Where is interleave?",
            "Search and read.",
            call("grep_files", pattern="def interleave", include="*.py"),
            call("read_file", file_path="toolz/itertoolz.py", offset=240, limit=8),
        ),
        thinking_turn(
            "Oops.",
            "Patch it.",
            '<tool_call>\n{"name": "apply_patch", "arguments": {"input": }\n</tool_call>',
        ),
        thinking_turn("Cycle over what is left.", "Patch it.", call("apply_patch", input=patch)),
        thinking_turn("Done.", "Submit.", call("shell_command", command=SUBMIT)),
    ]
    mix = {"bash_block": 0.5, "codex": 0.5}
    seed = next(s for s in range(100) if choose_harness(TOOLZ, mix, s) == "codex")
    try:
        with FakeSGLang(qwen_tokenizer, script) as sglang:
            sample = await generate(
                plugin_args(
                    sglang, qwen_tokenizer_dir, harness_mix=mix, harness_seed=seed, dynamic_history=False
                ),
                new_sample(),
                dict(SAMPLING),
            )
    finally:
        await e2e.shutdown()
    info = sample.metadata["swe"]
    assert info["status"] == "resolved" and info["harness"] == "codex", info
    assert info["format_errors"] == 1 and info["steps"] == 4 and info["prefix_breaks"] == 0
    # the tools are in the first prompt, rendered by the chat template into the system turn
    prompt_text = qwen_tokenizer.decode(sglang.requests[0]["input_ids"])
    assert (
        "<tools>" in prompt_text and '"name": "apply_patch"' in prompt_text and "shell_command" in prompt_text
    )
    # the whole sample is the template's rendering of the conversation (tool results as <tool_response>)
    saved = next((tmp_path / "rollouts").iterdir())
    traj = json.loads((saved / "traj.json").read_text())
    assert traj["harness"] == "codex" and json.loads((saved / "meta.json").read_text())["harness"] == "codex"
    rendered = codec.renderer.render(traj["messages"], tools=CodexHarness().tool_schemas)
    assert qwen_tokenizer.decode(sample.tokens) + "\n" == rendered
    assert rendered.count("<tool_response>") == 3  # search, read, patch; the format error is a user turn
    tool_messages = [m for m in traj["messages"] if m["role"] == "tool"]
    assert "toolz/itertoolz.py" in tool_messages[0]["content"] and "L245:" in tool_messages[1]["content"]
    assert tool_messages[2]["content"].startswith(
        "Success. Updated the following files:\nM toolz/itertoolz.py"
    )
    assert "is not valid JSON" in traj["messages"][6]["content"] and traj["messages"][6]["role"] == "user"
    assert "itertools.cycle" in (saved / "patch.diff").read_text()
    assert not leftover_containers(docker_client, pool)


async def test_eval_rollouts_use_the_eval_harness(
    pool, fixture_instances, qwen_tokenizer, qwen_tokenizer_dir, monkeypatch
):
    for key, value in {
        "SWE_POOL_URL": pool.url,
        "SWE_POOL_TOKEN": pool.token,
        "SWE_CLIENT_BACKOFF": "0.1",
    }.items():
        monkeypatch.setenv(key, value)
    script = [thinking_turn("Nothing to do.", "Done.", call("finish", message="no change"))]
    try:
        with FakeSGLang(qwen_tokenizer, script) as sglang:
            sample = await generate(
                plugin_args(sglang, qwen_tokenizer_dir, eval_harness="codeact", harness_mix={"codex": 1.0}),
                new_sample(),
                dict(SAMPLING),
                evaluation=True,
            )
    finally:
        await e2e.shutdown()
    info = sample.metadata["swe"]
    assert (
        info["harness"] == "codeact" and info["exit_reason"] == "submitted" and info["status"] == "no_patch"
    )
    assert "str_replace_editor" in qwen_tokenizer.decode(sglang.requests[0]["input_ids"])


async def test_chat_mode_codeact_episode_with_openai_tool_calls(
    client, pool, fixture_instances, docker_client
):
    def tool_call(call_id: str, name: str, **arguments) -> dict:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    script = [
        ChatReply(
            "Let me look.",
            reasoning_content="R1",
            finish_reason="tool_calls",
            tool_calls=[
                tool_call(
                    "c1",
                    "str_replace_editor",
                    command="view",
                    path="/testbed/toolz/itertoolz.py",
                    view_range=[244, 246],
                )
            ],
        ),
        ChatReply(
            "",
            finish_reason="tool_calls",
            tool_calls=[
                tool_call(
                    "c2", "str_replace_editor", command="str_replace", path="/testbed/toolz/itertoolz.py"
                )
            ],
        ),
        ChatReply(
            "Fix.",
            finish_reason="tool_calls",
            tool_calls=[
                tool_call(
                    "c3",
                    "str_replace_editor",
                    command="str_replace",
                    path="/testbed/toolz/itertoolz.py",
                    old_str=OLD,
                    new_str=NEW,
                ),
                tool_call(
                    "c4",
                    "execute_bash",
                    command='python3 -c "from toolz import interleave; '
                    'print(list(interleave([[1, 2, 3], [4], [5, 6, 7]])))"',
                ),
            ],
        ),
        ChatReply(
            "Done.", finish_reason="tool_calls", tool_calls=[tool_call("c5", "finish", message="fixed")]
        ),
    ]
    with FakeOpenAI(script) as server:
        policy = OpenAIChatPolicy(
            OpenAIChatConfig(model="fake/swe-policy", api_base=server.base_url, retries=0)
        )
        result = await run_instance(
            fixture_instances[TOOLZ],
            policy,
            CodeActHarness(),
            client=client,
            config=AgentConfig(step_limit=8, command_timeout=60),
        )
    agent = result.agent
    assert result.status is GradeStatus.RESOLVED and agent.exit_reason is ExitReason.SUBMITTED, agent.error
    assert agent.submission == "fixed" and agent.harness == "codeact" and agent.format_errors == 0
    # the tools go to the endpoint; every call id is answered by a tool message, format errors included
    first = server.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["execute_bash", "str_replace_editor", "finish"]
    last = server.requests[-1]["messages"]
    calls = [tc["id"] for m in last if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert calls == answered == ["c1", "c2", "c3", "c4"]
    assert last[2]["reasoning_content"] == "R1"
    by_id = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert "`str_replace` needs old_str" in by_id["c2"]
    assert "   245\t" + OLD in by_id["c1"]
    assert "[1, 4, 5, 2, 6, 3, 7]" in by_id["c4"]
    assert agent.steps[1].format_error is None and "needs old_str" in agent.steps[1].observation
    assert not leftover_containers(docker_client, pool)
