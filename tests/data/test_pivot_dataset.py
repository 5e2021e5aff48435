"""data/build_pivot_dataset.py and data/profile_pivots.py: expert trajectories -> pivots -> informative pivots.

Inputs: a traj.json written by our own eval (gold policy on a fixture task, real local fleet), a
thinking trajectory in the same schema, OpenAI-messages JSONL with tool calls, Responses-style rows.
Profiling runs against the scripted OpenAI server (resume, concurrency, errors).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from row_factories import FIXTURE_INSTANCES, ROOT, read_jsonl, run_tool, write_jsonl

from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI

pytestmark = pytest.mark.slow  # runs the data tools as subprocesses, as users do

BUILD, PROFILE = "build_pivot_dataset.py", "profile_pivots.py"
EDITOR = {
    "type": "function",
    "function": {
        "name": "str_replace_editor",
        "description": "view or edit files",
        "parameters": {
            "type": "object",
            "required": ["command", "path"],
            "properties": {"command": {"type": "string"}, "path": {"type": "string"}},
        },
    },
}
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "execute_bash",
        "description": "run a command",
        "parameters": {
            "type": "object",
            "required": ["command"],
            "properties": {"command": {"type": "string"}},
        },
    },
}


@pytest.fixture(scope="session")
def gold_run(fixture_instances, tmp_path_factory):
    """A real eval run of the gold policy on one fixture task: its traj.json is our expert trajectory."""
    out = tmp_path_factory.mktemp("gold")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "eval" / "eval_swe.py"),
            "--data",
            str(FIXTURE_INSTANCES),
            "--policy",
            "gold",
            "--local-fleet",
            "--output-dir",
            str(out),
            "--instance-ids",
            "pytoolz__toolz-9001",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def thinking_traj(resolved: bool = True) -> dict:
    """Our traj.json schema with reasoning and a turn that did not parse."""
    return {
        "instance_id": "demo__demo-1",
        "status": "resolved" if resolved else "unresolved",
        "resolved": resolved,
        "messages": [
            {"role": "system", "content": "You are an engineer."},
            {"role": "user", "content": "Fix interleave."},
            {
                "role": "assistant",
                "content": "Look.\n\n```bash\ngrep -rn interleave toolz\n```",
                "reasoning_content": "Find the function first.",
            },
            {
                "role": "user",
                "content": "<returncode>0</returncode>\n<output>\ntoolz/itertoolz.py:9\n</output>",
            },
            {"role": "assistant", "content": "Hmm, no block.", "reasoning_content": "Oops."},
            {"role": "user", "content": "Your answer could not be run: it has no ```bash block"},
            {
                "role": "assistant",
                "content": "Read.\n\n```bash\nsed -n '1,40p' toolz/itertoolz.py\n```",
                "reasoning_content": "Read it.",
            },
        ],
        "steps": [],
    }


def openai_row(**over) -> dict:
    call = [
        {
            "id": "c1",
            "type": "function",
            "function": {
                "name": "str_replace_editor",
                "arguments": '{"command": "view", "path": "/testbed/a.py"}',
            },
        }
    ]
    two = [
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'},
        },
        {
            "id": "c3",
            "type": "function",
            "function": {"name": "execute_bash", "arguments": '{"command": "pwd"}'},
        },
    ]
    row = {
        "instance_id": "demo__demo-2",
        "resolved": True,
        "tools": [EDITOR, BASH_TOOL],
        "messages": [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "Fix a.py."},
            {"role": "assistant", "content": "", "reasoning_content": "View it.", "tool_calls": call},
            {"role": "tool", "tool_call_id": "c1", "content": "1 x = 1"},
            {"role": "assistant", "content": "", "tool_calls": two},
            {"role": "tool", "tool_call_id": "c2", "content": "a.py"},
            {"role": "tool", "tool_call_id": "c3", "content": "/testbed"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c4",
                        "type": "function",
                        "function": {"name": "execute_bash", "arguments": '{"command": "python a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c4", "content": "ok"},
            {"role": "assistant", "content": "Done: a.py is fixed."},
        ],
    }
    row.update(over)
    return row


def responses_row(command: str = "grep -rn foo src", **over) -> dict:
    row = {
        "responses_create_params": {
            "input": [
                {"role": "developer", "content": "Use the tools."},
                {"role": "user", "content": [{"type": "input_text", "text": "Fix foo."}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "List files."}]},
                {
                    "type": "function_call",
                    "call_id": "f1",
                    "name": "execute_bash",
                    "arguments": '{"command": "ls"}',
                },
                {"type": "function_call_output", "call_id": "f1", "output": "src"},
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "execute_bash",
                    "description": "run",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
                }
            ],
        },
        "expected_action": {
            "type": "function_call",
            "name": "execute_bash",
            "arguments": json.dumps({"command": command}),
        },
    }
    row.update(over)
    return row


def build(tmp_path, *inputs, **opts):
    args = [str(i) for i in inputs] + ["--output-dir", str(tmp_path / "out")]
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    proc = run_tool(BUILD, *args)
    out = tmp_path / "out"
    train = read_jsonl(out / "train.jsonl") if (out / "train.jsonl").exists() else []
    val = read_jsonl(out / "val.jsonl") if (out / "val.jsonl").exists() else []
    stats = json.loads((out / "stats.json").read_text()) if (out / "stats.json").exists() else {}
    return proc, train, val, stats


# --------------------------------------------------------------------------- building


def test_eval_traj_becomes_one_pivot_per_assistant_turn(gold_run, tmp_path):
    proc, train, val, stats = build(tmp_path, gold_run, val_size=0)
    assert proc.returncode == 0, proc.stderr
    traj = json.loads(next(gold_run.rglob("traj.json")).read_text())
    turns = [m for m in traj["messages"] if m["role"] == "assistant"]
    assert len(train) == len(turns) == 2 and val == []
    for k, row in enumerate(train):
        assert set(row) == {"text", "metadata"} and row["metadata"]["data_source"] == "pivot"
        pivot = row["metadata"]["pivot"]
        assert pivot["instance_id"] == "pytoolz__toolz-9001" and pivot["step_index"] == k
        assert pivot["harness"] == "bash_block" and pivot["tools"] is None and pivot["resolved"] is True
        cut = traj["messages"].index(turns[k])
        assert pivot["messages"] == traj["messages"][:cut]  # the context, exactly
        assert row["text"] == pivot["messages"][-1]["content"]
    assert train[0]["metadata"]["pivot"]["expected_action"] == {
        "tool": "bash",
        "arguments": {"command": "git apply --verbose /tmp/swe-rl-gold.patch"},
    }
    assert stats["trajectories"] == 1 and stats["pivots"] == 2
    # the submit turn can be left out
    _, train, _, stats = build(tmp_path, gold_run, val_size=0, skip_submit=True)
    assert len(train) == 1 and stats["skipped"] == {"submit": 1}


def test_thinking_kept_unparsed_turns_skipped_and_resolved_filter(tmp_path):
    good = tmp_path / "runs" / "a" / "traj.json"
    bad = tmp_path / "runs" / "b" / "traj.json"
    for path, resolved in ((good, True), (bad, False)):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(thinking_traj(resolved)))
    proc, train, _, stats = build(tmp_path, tmp_path / "runs", val_size=0, only_resolved=True)
    assert proc.returncode == 0, proc.stderr
    assert stats["trajectories"] == 2 and stats["trajectories_not_resolved"] == 1
    assert [r["metadata"]["pivot"]["step_index"] for r in train] == [0, 2]  # turn 1 had no block
    assert stats["skipped"] == {"no_action": 1}
    last = train[1]["metadata"]["pivot"]
    assert [m.get("reasoning_content") for m in last["messages"] if m["role"] == "assistant"] == [
        "Find the function first.",
        "Oops.",
    ]
    assert last["expected_action"]["arguments"]["command"] == "sed -n '1,40p' toolz/itertoolz.py"


def test_openai_messages_with_tool_calls(tmp_path):
    src = write_jsonl(tmp_path / "expert.jsonl", [openai_row(), openai_row(instance_id="x", resolved=False)])
    proc, train, _, stats = build(tmp_path, src, val_size=0, only_resolved=True)
    assert proc.returncode == 0, proc.stderr
    assert len(train) == 2
    first, second = (r["metadata"]["pivot"] for r in train)
    assert first["harness"] == "tool_call" and first["tools"] == [EDITOR, BASH_TOOL]
    assert first["expected_action"] == {
        "tool": "str_replace_editor",
        "arguments": {"command": "view", "path": "/testbed/a.py"},
    }
    assert second["expected_action"] == {"tool": "execute_bash", "arguments": {"command": "python a.py"}}
    assert second["step_index"] == 2 and second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c3",
        "content": "/testbed",
    }
    assert stats["skipped"] == {"multiple_tool_calls": 1, "no_action": 1}


def test_responses_rows_are_pivots_already(tmp_path):
    src = write_jsonl(
        tmp_path / "swe1.jsonl",
        [
            responses_row(),
            responses_row("pytest -x"),
            responses_row(expected_action={"type": "message", "content": "done"}),
            "not json",
        ],
    )
    proc, train, _, stats = build(tmp_path, src, val_size=0)
    assert proc.returncode == 0, proc.stderr
    assert len(train) == 2 and stats["skipped"] == {"expected_message": 1, "bad_row": 1}
    pivot = train[0]["metadata"]["pivot"]
    assert pivot["messages"] == [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Fix foo."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "List files.",
            "tool_calls": [
                {
                    "id": "f1",
                    "type": "function",
                    "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "f1", "content": "src"},
    ]
    assert pivot["tools"][0]["function"]["name"] == "execute_bash" and pivot["harness"] == "tool_call"
    assert pivot["expected_action"] == {"tool": "execute_bash", "arguments": {"command": "grep -rn foo src"}}
    assert pivot["step_index"] == 1 and train[0]["text"] == "src"


def test_dedupe_length_limits_and_split(tmp_path, qwen_tokenizer_dir):
    rows = [responses_row(f"grep -rn foo{i} src") for i in range(6)] + [responses_row("grep -rn foo0 src")]
    src = write_jsonl(tmp_path / "swe1.jsonl", rows)
    _, train, val, stats = build(tmp_path, src, val_size=2)
    assert len(train) == 4 and len(val) == 2 and stats["skipped"] == {"duplicate": 1}
    ids = [r["metadata"]["pivot"]["pivot_id"] for r in train + val]
    assert len(set(ids)) == 6
    assert [r["metadata"]["pivot"]["expected_action"]["arguments"]["command"] for r in val] == [
        "grep -rn foo4 src",
        "grep -rn foo5 src",
    ]  # the last ones are held out
    _, train, val, _ = build(tmp_path, src, val_size=2, no_dedupe=True, shuffle=True, seed=3)
    assert len(train) + len(val) == 7
    _, train, _, stats = build(tmp_path, src, val_size=0, max_context_chars=10)
    assert train == [] and stats["skipped"]["context_too_long"] == 7  # none kept: no duplicates either
    # token limit: the prompt as the plugin renders it (chat template + tools), real tokenizer
    _, train, _, _ = build(tmp_path, src, val_size=0, max_context_tokens=100000, tokenizer=qwen_tokenizer_dir)
    n = train[0]["metadata"]["pivot"]["prompt_tokens"]
    assert 100 < n < 1000
    _, train, _, stats = build(
        tmp_path, src, val_size=0, max_context_tokens=n - 1, tokenizer=qwen_tokenizer_dir
    )
    assert train == [] and stats["skipped"]["context_too_long"] == 7  # none kept: no duplicates either
    proc, *_ = build(tmp_path, tmp_path / "missing.jsonl")
    assert proc.returncode == 2 and "no such input" in proc.stderr


# --------------------------------------------------------------------------- profiling


def answer(command: str) -> ChatReply:
    call = {
        "id": "x",
        "type": "function",
        "function": {"name": "execute_bash", "arguments": json.dumps({"command": command})},
    }
    return ChatReply(content="", tool_calls=[call])


class Policy:
    """Pivot i (its command greps foo<i>) is matched by `hits[i]` of every k answers, in order."""

    def __init__(self, hits: dict[int, int]) -> None:
        self.hits = hits
        self.seen: dict[int, int] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> ChatReply:
        i = body["messages"][1]["content"].count("!")  # which pivot (see marked_pivots)
        with self.lock:
            n = self.seen.get(i, 0)
            self.seen[i] = n + 1
        return answer(f"grep -nr foo{i} ./src") if n < self.hits.get(i, 0) else answer("ls -la")


def marked_pivots(tmp_path, n: int) -> list:
    """Pivot i's user message ends with i exclamation marks, so the scripted policy knows which it is."""
    rows = []
    for i in range(n):
        row = responses_row(f"grep -rn foo{i} src")
        row["responses_create_params"]["input"][1]["content"][0]["text"] = "Fix foo." + "!" * i
        rows.append(row)
    _, train, _, _ = build(tmp_path, write_jsonl(tmp_path / "swe1.jsonl", rows), val_size=0)
    return train


def profile(tmp_path, server, pivots, *extra):
    src = write_jsonl(tmp_path / "pivots.jsonl", pivots)
    out = tmp_path / "informative.jsonl"
    proc = run_tool(
        PROFILE,
        src,
        "--output",
        out,
        "--api-base",
        server.base_url,
        "--model",
        "ref",
        "--no-progress",
        *map(str, extra),
    )
    return proc, (read_jsonl(out) if out.exists() else []), out


def test_profiling_keeps_mixed_pivots_with_pass_rates(tmp_path):
    pivots = marked_pivots(tmp_path, 4)
    policy = Policy({0: 0, 1: 2, 2: 4, 3: 3})  # of k=4: never, half, always, 3/4
    with FakeOpenAI([policy] * 16) as server:
        proc, kept, _ = profile(tmp_path, server, pivots, "--k", 4, "--max-mean", 0.75, "--concurrency", 4)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    assert stats == {
        "rows": 4,
        "profiled": 4,
        "kept": 1,
        "errors": {},
        "matches_of_k": {"0/4": 1, "2/4": 1, "3/4": 1, "4/4": 1},
    }
    (row,) = kept
    assert row["metadata"]["pivot"]["expected_action"]["arguments"]["command"] == "grep -rn foo1 src"
    assert row["metadata"]["pivot"]["profile"] == {
        "k": 4,
        "matches": 2,
        "pass_rate": 0.5,
        "mean_score": 0.5,
        "categories": {"match": 2, "mismatch": 2},
        "model": "ref",
    }
    body = server.requests[0]
    assert body["model"] == "ref" and body["tools"][0]["function"]["name"] == "execute_bash"
    assert (
        body["messages"][2]["reasoning_content"] == "List files."
    )  # the expert's thinking is in the context


def test_profiling_resumes_and_never_counts_failures_as_zero(tmp_path):
    pivots = marked_pivots(tmp_path, 3)
    policy = Policy({0: 1, 1: 1, 2: 1})

    def flaky(body: dict) -> ChatReply:
        if body["messages"][1]["content"].count("!") == 2:
            return ChatReply(status=500, content="boom")
        return policy(body)

    with FakeOpenAI([flaky] * 6 + [ChatReply(status=500)] * 2) as server:
        proc, kept, out = profile(tmp_path, server, pivots, "--k", 2, "--retries", 0, "--concurrency", 1)
    assert proc.returncode == 1 and "error on pivot" in proc.stderr
    assert len(kept) == 2 and json.loads(proc.stdout.strip().splitlines()[-1])["errors"] == {
        "RuntimeError": 1
    }
    cache = read_jsonl(out.parent / "informative.jsonl.profile.jsonl")
    assert len(cache) == 2  # the failed pivot is not recorded
    with (out.parent / "informative.jsonl.profile.jsonl").open("a") as fh:
        fh.write('{"pivot_id": "torn')  # an interrupted run's last line
    with FakeOpenAI([policy] * 2) as server:
        proc, kept, _ = profile(tmp_path, server, pivots, "--k", 2, "--retries", 0)
    assert proc.returncode == 0, proc.stderr
    assert len(server.requests) == 2  # only the missing pivot was asked for again
    assert len(kept) == 3 and {r["metadata"]["pivot"]["profile"]["pass_rate"] for r in kept} == {0.5}


@dataclass
class GatedOpenAI(FakeOpenAI):
    """Holds every request until `gate` of them are in flight at once (then lets all through), and counts
    the most ever in flight: concurrency measured at the server, not by wall time."""

    gate: int = 1
    in_flight: int = 0
    peak: int = 0
    _open: asyncio.Event | None = None

    async def _completions(self, request: Any) -> Any:
        if self._open is None:
            self._open = asyncio.Event()  # made on the server's own event loop
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.in_flight >= self.gate:
                self._open.set()
            try:
                await asyncio.wait_for(self._open.wait(), 60)
            except asyncio.TimeoutError:  # never as many at once: let everything through (peak tells)
                self._open.set()
            return await super()._completions(request)
        finally:
            self.in_flight -= 1


def test_profiling_runs_requests_concurrently(tmp_path):
    pivots = marked_pivots(tmp_path, 4)
    # no request is answered before more than one pivot's k=4 requests are open at once
    with GatedOpenAI(script=[Policy({i: 1 for i in range(4)})] * 16, gate=5) as server:
        proc, kept, _ = profile(tmp_path, server, pivots, "--k", 4, "--concurrency", 8)
    assert proc.returncode == 0, proc.stderr
    assert len(kept) == 4
    assert 5 <= server.peak <= 8  # several pivots at once, never more than the limit
