"""Tool calls: Hermes text (token mode) and OpenAI tool_calls (chat mode), valid and malformed turns,
argument checking, feedback messages, submission, the mixing of harnesses and the registry."""

from __future__ import annotations

import collections
import json
import re

import pytest

from swe_rl.agent.errors import FormatError
from swe_rl.agent.protocols import PolicyTurn
from swe_rl.fleet.client import ExecResult
from swe_rl.harnesses.apply_patch import (
    PatchError,
    apply_hunks,
    parse_patch,
    patch_from_diff,
)
from swe_rl.harnesses.codeact import CodeActHarness
from swe_rl.harnesses.codex import CodexHarness
from swe_rl.harnesses.opencode import OpenCodeHarness
from swe_rl.harnesses.registry import HARNESS_NAMES, choose_harness, harness_by_name
from swe_rl.harnesses.tool_calls import (
    ToolCall,
    ToolCallError,
    calls_from_openai,
    calls_from_text,
    render_hermes,
    to_openai,
)
from swe_rl.harnesses.tools import glob_to_regex
from swe_rl.tasks import TaskInstance

INSTANCE = TaskInstance(
    instance_id="demo__demo-1",
    repo="demo/demo",
    problem_statement="`add(1, 1)` returns 3.",
    image="swe-rl/base:bookworm",
)


def hermes(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def openai_call(name: str, arguments, call_id: str | None = "call_abc") -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def result(output: str, returncode: int = 0) -> ExecResult:
    return ExecResult(
        returncode=returncode,
        output=output,
        timed_out=False,
        truncated=False,
        output_bytes=len(output),
        duration=0.1,
    )


# --------------------------------------------------------------------------- Hermes / OpenAI


def test_hermes_calls_are_read_in_order_and_thinking_is_ignored():
    text = (
        '<think>maybe <tool_call>{"name": "x", "arguments": {}}</tool_call></think>\n\nLook first.\n'
        + hermes("execute_bash", command="ls")
        + "\n"
        + hermes("finish", message="ok")
    )
    calls = calls_from_text(text)
    assert calls == [
        ToolCall("execute_bash", {"command": "ls"}, "call_0"),
        ToolCall("finish", {"message": "ok"}, "call_1"),
    ]
    # arguments given as a JSON string are accepted too
    assert calls_from_text(
        '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
    ) == [ToolCall("bash", {"command": "ls"})]
    assert calls_from_text("no calls here") == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>', "is not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'has no "name"'),
        ('<tool_call>{"name": "bash", "arguments": ["ls"]}</tool_call>', "must be a JSON object, not list"),
        ('<tool_call>{"name": "bash", "arguments": "{oops"}</tool_call>', "arguments are not valid JSON"),
        ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}', "is not closed"),
        ('{"name": "bash"}</tool_call>', "has no <tool_call> before it"),
    ],
)
def test_malformed_hermes_calls(text, reason):
    with pytest.raises(ToolCallError) as err:
        calls_from_text(text)
    assert reason in err.value.reason


def test_openai_calls_round_trip_and_errors():
    calls = calls_from_openai(
        [openai_call("bash", {"command": "ls"}), openai_call("read", {"file_path": "a"}, None)]
    )
    assert calls == [
        ToolCall("bash", {"command": "ls"}, "call_abc"),
        ToolCall("read", {"file_path": "a"}, "call_1"),
    ]
    assert calls_from_openai(to_openai(calls)) == calls
    with pytest.raises(ToolCallError) as err:
        calls_from_openai([openai_call("bash", "{not json"), openai_call("read", {}, None)])
    assert "not valid JSON" in err.value.reason and err.value.call_ids == ["call_abc", "call_1"]
    # the Hermes rendering is what the Qwen3 chat template writes, and parses back
    assert calls_from_text(render_hermes(calls)) == [
        ToolCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls)
    ]


# --------------------------------------------------------------------------- harness parsing


@pytest.mark.parametrize(
    "harness", [CodeActHarness(), CodexHarness(), OpenCodeHarness()], ids=lambda h: h.name
)
def test_every_harness_has_schemas_and_prompts(harness):
    names = [s["function"]["name"] for s in harness.tool_schemas]
    assert names == list(harness.tools)
    for schema in harness.tool_schemas:
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
    system, user = harness.initial_messages(INSTANCE, step_limit=7)
    assert system["role"] == "system" and all(n in system["content"] for n in names)
    assert "`add(1, 1)` returns 3." in user["content"] and "7" in user["content"]


def test_tool_names_and_argument_shapes():
    assert list(CodeActHarness().tools) == ["execute_bash", "str_replace_editor", "finish"]
    editor = CodeActHarness().tools["str_replace_editor"].parameters["properties"]
    assert editor["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert {"path", "file_text", "old_str", "new_str", "insert_line", "view_range"} <= set(editor)
    assert list(CodexHarness().tools) == [
        "shell_command",
        "apply_patch",
        "read_file",
        "list_dir",
        "grep_files",
    ]
    assert set(CodexHarness().tools["shell_command"].parameters["properties"]) == {
        "command",
        "workdir",
        "timeout_ms",
    }
    assert list(OpenCodeHarness().tools) == ["bash", "read", "write", "edit", "glob", "grep", "list_dir"]
    assert set(OpenCodeHarness().tools["edit"].parameters["properties"]) == {
        "file_path",
        "old_string",
        "new_string",
        "replace_all",
    }


def test_token_mode_turn_parses_to_tool_actions():
    h = CodeActHarness()
    turn = PolicyTurn(
        text="Let me look.\n"
        + hermes("str_replace_editor", command="view", path="/testbed/a.py", view_range=["1", 5]),
        reasoning="think",
    )
    [action] = h.parse(turn)
    assert action.kind == "tool" and action.name == "str_replace_editor" and action.call_id == "call_0"
    assert action.arguments == {"command": "view", "path": "/testbed/a.py", "view_range": [1, 5]}
    assert action.command.startswith("str_replace_editor {")
    # token mode keeps the text as is (no tool_calls field): the sampled ids are the history
    assert h.assistant_message(turn) == {
        "role": "assistant",
        "content": turn.text,
        "reasoning_content": "think",
    }
    [bash] = h.parse(PolicyTurn(text=hermes("execute_bash", command="ls -la", timeout="30")))
    assert bash.command == "ls -la" and bash.arguments == {"command": "ls -la", "timeout": 30.0}


def test_chat_mode_turn_keeps_tool_calls_and_ids():
    h = OpenCodeHarness()
    turn = PolicyTurn(
        text="",
        tool_calls=[
            openai_call("bash", {"command": "ls"}, "c1"),
            openai_call("read", {"file_path": "x.py"}, "c2"),
        ],
    )
    actions = h.parse(turn)
    assert [(a.name, a.call_id) for a in actions] == [("bash", "c1"), ("read", "c2")]
    message = h.assistant_message(turn)
    assert [tc["id"] for tc in message["tool_calls"]] == ["c1", "c2"]
    [obs] = h.observation_messages(actions[1], result("<file>...</file>"), remaining_steps=10)
    assert obs == {"role": "tool", "tool_call_id": "c2", "content": "<file>...</file>"}
    [obs] = h.observation_messages(actions[0], result("x" * 50), remaining_steps=2, max_chars=20)
    assert "30 characters in the middle were left out" in obs["content"] and "2 turns left" in obs["content"]


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        (PolicyTurn(text="I think the fix is done."), "it has no tool call"),
        (PolicyTurn(text="cut", finish_reason="length"), "cut off at the length limit"),
        (PolicyTurn(text=hermes("run_shell", command="ls")), "there is no tool 'run_shell'"),
        (PolicyTurn(text=hermes("bash")), "bash needs 'command'"),
        (PolicyTurn(text=hermes("bash", command="ls", cwd="/")), "bash does not take 'cwd'"),
        (PolicyTurn(text=hermes("read", file_path="a", offset="ten")), "'offset' must be an integer"),
        (
            PolicyTurn(text=hermes("edit", file_path="a", old_string="x", new_string=3)),
            "'new_string' must be a string",
        ),
        (PolicyTurn(text=hermes("bash", command="ls") * 9), "9 tool calls, at most 8"),
        (PolicyTurn(text='<tool_call>{"name": "bash", "arguments": {"command": "ls"}'), "is not closed"),
    ],
)
def test_malformed_turns_are_format_errors(turn, reason):
    with pytest.raises(FormatError) as err:
        OpenCodeHarness().parse(turn)
    assert reason in err.value.reason


def test_format_error_feedback_answers_every_chat_call():
    h = CodexHarness()
    turn = PolicyTurn(
        text="",
        tool_calls=[openai_call("shell_command", {"command": "ls"}, "a"), openai_call("nope", {}, "b")],
    )
    with pytest.raises(FormatError) as err:
        h.parse(turn)
    messages = h.format_error_messages(err.value, remaining_steps=5)
    assert [(m["role"], m["tool_call_id"]) for m in messages] == [("tool", "a"), ("tool", "b")]
    assert "there is no tool 'nope'" in messages[0]["content"]
    with pytest.raises(FormatError) as err:
        h.parse(PolicyTurn(text="no call"))
    [message] = h.format_error_messages(err.value, remaining_steps=5)
    assert message["role"] == "user" and "it has no tool call" in message["content"]
    enum = CodeActHarness()
    with pytest.raises(FormatError) as err:
        enum.parse(PolicyTurn(text=hermes("str_replace_editor", command="delete", path="/a")))
    assert "'command' must be one of 'view', 'create'" in err.value.reason


def test_submission_through_finish_or_the_sentinel():
    codeact, codex, opencode = CodeActHarness(), CodexHarness(), OpenCodeHarness()
    [finish] = codeact.parse(PolicyTurn(text=hermes("finish", message="Fixed add.")))
    assert codeact.submission(finish, result("Fixed add.")) == "Fixed add."
    [bash] = codeact.parse(PolicyTurn(text=hermes("execute_bash", command="ls")))
    assert codeact.submission(bash, result("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff")) is None
    submit = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff --git a/x b/x\n"
    [shell] = codex.parse(PolicyTurn(text=hermes("shell_command", command=codex.config.submit_command)))
    assert codex.submission(shell, result(submit)) == "diff --git a/x b/x\n"
    assert codex.submission(shell, result("Exit code: 0\nOutput:\nx")) is None
    [read] = opencode.parse(PolicyTurn(text=hermes("read", file_path="x")))
    assert opencode.submission(read, result(submit)) is None


# --------------------------------------------------------------------------- apply_patch format


def test_codex_patch_parsing_and_hunks():
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@ def f():\n-    return 1\n"
        "+    return 2\n*** End of File\n*** Add File: n.txt\n+x\n*** Delete File: d.py\n*** End Patch\n"
    )
    assert [(o.kind, o.path, o.move_to) for o in ops] == [
        ("update", "a.py", "b.py"),
        ("add", "n.txt", None),
        ("delete", "d.py", None),
    ]
    assert ops[0].hunks[0].anchor == "def f():" and ops[0].hunks[0].at_eof
    text = "def g():\n    return 1\n\ndef f():\n    return 1\n"
    assert apply_hunks(text, ops[0].hunks, "a.py") == "def g():\n    return 1\n\ndef f():\n    return 2\n"
    # lenient on trailing whitespace, exact about the rest
    [op] = parse_patch("*** Begin Patch\n*** Update File: a\n@@\n x = 1   \n-y = 2\n+y = 3\n*** End Patch")
    assert apply_hunks("x = 1\ny = 2\n", op.hunks, "a") == "x = 1\ny = 3\n"
    with pytest.raises(PatchError, match="hunk 1 of a: the expected lines were not found"):
        apply_hunks("x = 1\ny = 5\n", op.hunks, "a")
    for bad, reason in [
        ("nothing", "must start with"),
        ("*** Begin Patch\n*** Add File: a\n+x", "must end with"),
        ("*** Begin Patch\n*** Frobnicate: a\n*** End Patch", "patch line 2: expected"),
        ("*** Begin Patch\n*** Add File: a\nx\n*** End Patch", "starts with '+'"),
        ("*** Begin Patch\n*** Update File: a\n@@\n?x\n*** End Patch", "a hunk line starts with"),
        ("*** Begin Patch\n*** End Patch", "changes no file"),
    ]:
        with pytest.raises(PatchError, match=re.escape(reason)):
            parse_patch(bad)


def test_a_unified_diff_becomes_a_codex_patch():
    diff = (
        "diff --git a/m.py b/m.py\nindex 1..2 100644\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a = 1\n"
        "-b = 2\n+b = 3\n \n"
        "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+z = 1\n"
    )
    patch = patch_from_diff(diff)
    ops = parse_patch(patch)
    assert [(o.kind, o.path) for o in ops] == [("update", "m.py"), ("add", "new.py")]
    assert apply_hunks("a = 1\nb = 2\n\nc = 4\n", ops[0].hunks, "m.py") == "a = 1\nb = 3\n\nc = 4\n"
    assert ops[1].content == ["z = 1"]
    assert patch_from_diff("diff --git a/x b/x\nBinary files a/x and b/x differ\n") is None


def test_globs():
    assert glob_to_regex("*.py").match("a/b/c.py") and glob_to_regex("*.py").match("c.py")
    assert glob_to_regex("src/**/test_*.py").match("src/x/y/test_a.py")
    assert glob_to_regex("src/**/test_*.py").match("src/test_a.py")
    assert not glob_to_regex("src/*.py").match("src/x/a.py")
    assert glob_to_regex("**/*.{py,txt}").match("a/b.txt")


# --------------------------------------------------------------------------- registry and mixing


def test_registry():
    for name in HARNESS_NAMES:
        assert harness_by_name(name).name == name
    assert harness_by_name("OpenHands").name == "codeact"
    with pytest.raises(ValueError, match="unknown harness 'swe_agent'"):
        harness_by_name("swe_agent")


def test_choice_is_deterministic_and_follows_the_weights():
    weights = {"bash_block": 0.4, "codeact": 0.2, "codex": 0.2, "opencode": 0.2}
    ids = [f"repo__proj-{i}" for i in range(4000)]
    first = [choose_harness(i, weights) for i in ids]
    assert first == [choose_harness(i, dict(weights)) for i in ids]  # same in every process and run
    counts = collections.Counter(first)
    assert set(counts) == set(weights)
    for name, weight in weights.items():
        assert abs(counts[name] / len(ids) - weight) < 0.03, counts
    # another seed reshuffles, zero weights are never chosen, a single harness is always chosen
    assert first != [choose_harness(i, weights, seed=1) for i in ids]
    assert {choose_harness(i, {"codex": 1, "opencode": 0}) for i in ids[:200]} == {"codex"}
    with pytest.raises(ValueError, match="sum to zero"):
        choose_harness("x", {"codex": 0})
    with pytest.raises(ValueError, match="unknown harness"):
        choose_harness("x", {"vim": 1})
