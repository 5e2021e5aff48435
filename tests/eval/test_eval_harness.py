"""The eval CLI's --harness: the gold policy and a chat model with OpenAI tool calls under tool-calling
harnesses, on a real local fleet with the fixture images; the harness is recorded in every artifact."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from swe_rl.eval import eval_swe
from swe_rl.fleet.local import LocalFleet
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"
TOOLZ = "pytoolz__toolz-9001"


@pytest.fixture(scope="module")
def fleet(docker_client):
    with LocalFleet(exec_servers=1, max_containers_per_node=8) as f:
        yield f


def run_eval(fleet, out: Path, *extra: str) -> dict:
    args = eval_swe.parse_args(
        ["--data", str(FIXTURES), "--output-dir", str(out), "--max-concurrent", "2", "--no-progress", *extra]
    )
    return asyncio.run(eval_swe.run(args, fleet.client_env()))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_unknown_harness_is_a_usage_error():
    with pytest.raises(SystemExit):
        eval_swe.parse_args(["--data", "x", "--output-dir", "y", "--policy", "gold", "--harness", "vim"])


@pytest.mark.parametrize("harness", ["codeact", "opencode"])
def test_gold_through_a_tool_harness(fleet, tmp_path, harness):
    summary = run_eval(
        fleet,
        tmp_path,
        "--policy",
        "gold",
        "--harness",
        harness,
        "--instance-ids",
        f"{TOOLZ},jpvanhal__inflection-9001",
    )
    assert summary["resolved"] == 2, summary
    for row in rows(tmp_path):
        assert row["harness"] == harness and row["format_errors"] == 0 and row["steps"] == 2
        traj = json.loads((tmp_path / row["dir"] / "traj.json").read_text())
        assert traj["harness"] == harness and any(m["role"] == "tool" for m in traj["messages"])
        assert json.loads((tmp_path / row["dir"] / "meta.json").read_text())["harness"] == harness
    assert json.loads((tmp_path / "run.json").read_text())["harness"] == harness


def test_chat_model_with_tool_calls_under_codex(fleet, tmp_path):
    from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI

    patch = (
        "*** Begin Patch\n*** Update File: toolz/itertoolz.py\n@@\n"
        "-            iters = itertools.takewhile(predicate, iters)\n"
        "+            iters = itertools.cycle(itertools.takewhile(predicate, iters))\n*** End Patch"
    )
    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"

    def call(call_id, name, **arguments):
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    script = [
        ChatReply("Patch.", finish_reason="tool_calls", tool_calls=[call("a", "apply_patch", input=patch)]),
        ChatReply("No call, just words."),
        ChatReply(
            "Submit.", finish_reason="tool_calls", tool_calls=[call("b", "shell_command", command=submit)]
        ),
    ]
    with FakeOpenAI(script, models=["fake-policy"]) as server:
        summary = run_eval(
            fleet,
            tmp_path,
            "--model",
            "openai/fake-policy",
            "--api-base",
            server.base_url,
            "--instance-ids",
            TOOLZ,
            "--harness",
            "codex",
        )
        sent = server.requests
    assert summary["resolved"] == 1
    assert [t["function"]["name"] for t in sent[0]["tools"]][:2] == ["shell_command", "apply_patch"]
    assert sent[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": "Success. Updated the following files:\nM toolz/itertoolz.py",
    }
    (row,) = rows(tmp_path)
    assert row["harness"] == "codex" and row["format_errors"] == 1 and row["exit_reason"] == "submitted"
