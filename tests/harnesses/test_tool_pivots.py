"""Tool-calling harnesses in pivot mode: a pivot row naming a harness gets its tool schemas (rendered into
the pivot context) and its Hermes turns are scored; pivot datasets built from token-mode trajectories of a
tool harness (traj.json with ``harness``) carry the tools and the expert's calls."""

from __future__ import annotations

import json
from collections import Counter

from swe_rl.data import build_pivot_dataset as builder
from swe_rl.harnesses import CodexHarness, OpenCodeHarness
from swe_rl.rewards.pivot import score_turn
from swe_rl.slime.records import PivotRow


def hermes(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_a_pivot_row_naming_a_harness_gets_its_tools_and_parses_tool_calls():
    row = PivotRow.model_validate(
        {
            "messages": [{"role": "user", "content": "fix it"}],
            "harness": "opencode",
            "expected_action": {"tool": "read", "arguments": {"file_path": "src/a.py"}},
        }
    )
    assert row.tools == OpenCodeHarness().tool_schemas and row.parser == "tool_call"
    scored = score_turn(
        "Look.\n" + hermes("read", file_path="/testbed/src/a.py"),
        row.expert(),
        harness=row.parser,
        tools=row.tools,
        workdir="/testbed",
    )
    assert scored.category.value == "match", scored
    wrong = score_turn(hermes("glob", pattern="*.py"), row.expert(), harness=row.parser, tools=row.tools)
    assert wrong.category.value == "wrong_tool"
    # rows with their own tools or a plain parser are left as they are
    own = PivotRow.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "harness": "codex",
            "tools": [],
            "expected_action": {"tool": "bash", "arguments": {"command": "ls"}},
        }
    )
    assert (
        own.tools == [] and PivotRow.model_validate({**own.model_dump(), "harness": "auto"}).parser == "auto"
    )


def test_pivots_from_a_token_mode_codex_trajectory():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "issue"},
        {
            "role": "assistant",
            "content": "Look.\n" + hermes("read_file", file_path="a.py"),
            "reasoning_content": "r",
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "L1: x = 1"},
        {
            "role": "assistant",
            "content": "Fix.\n" + hermes("apply_patch", input="*** Begin Patch\n*** End Patch"),
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "Error: the patch changes no file"},
        {"role": "assistant", "content": "I am done."},
    ]
    skip: Counter = Counter()
    traj = builder.trajectory_of_row(
        {"instance_id": "demo-1", "harness": "codex", "resolved": True, "messages": messages}, "traj", skip
    )
    assert traj is not None and traj.tools == CodexHarness().tool_schemas
    found = list(builder.pivots(traj, workdir="/testbed", skip=skip))
    assert [p["expected_action"]["tool"] for p in found] == ["read_file", "apply_patch"]
    assert found[0]["tools"] == CodexHarness().tool_schemas and found[0]["messages"][-1]["content"] == "issue"
    assert skip["no_action"] == 1
