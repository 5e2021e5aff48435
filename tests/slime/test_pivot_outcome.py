"""Pieces of executable pivots without a fleet (swe_rl/slime/pivot_exec.py): settings, the expert's turns
as a script, the exit codes its recording shows, and what counts as the same outcome."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from swe_rl.slime.pivot_exec import PivotExecSettings, expert_turns, recorded_returncodes, same_outcome
from swe_rl.slime.records import PivotRow

EDIT = {"patch": "diff a", "output": "", "returncode": 0, "timed_out": False, "format_error": None}
EDIT.update(submitted=False, flags=[])


def test_settings():
    assert PivotExecSettings.from_args(SimpleNamespace()) == PivotExecSettings("match", 1)
    assert not PivotExecSettings.from_args(SimpleNamespace()).executes
    got = PivotExecSettings.from_args(
        SimpleNamespace(swe_pivot_reward="execute+match", n_samples_per_prompt=8)
    )
    assert got == PivotExecSettings("execute+match", 8) and got.executes
    with pytest.raises(ValueError, match="swe_pivot_reward"):
        PivotExecSettings.from_args(SimpleNamespace(swe_pivot_reward="run"))


def test_expert_turns_and_recorded_returncodes():
    row = PivotRow(
        messages=[
            {"role": "user", "content": "fix"},
            {"role": "assistant", "content": "```bash\nls\n```"},
            {"role": "user", "content": "<returncode>2</returncode>\n<output>\n</output>"},
            {"role": "assistant", "content": "```bash\ncat a\n```"},
            {"role": "user", "content": "no code shown"},
        ],
        expected_action={"tool": "bash", "arguments": {"command": "grep x a"}},
    )
    turns = expert_turns(row)
    assert [t.text for t in turns] == ["```bash\nls\n```", "```bash\ncat a\n```", "```bash\ngrep x a\n```"]
    assert recorded_returncodes(row) == [2, None]
    tool = PivotRow(
        messages=[{"role": "user", "content": "fix"}],
        expected_action={"tool": "str_replace_editor", "arguments": {"command": "view", "path": "a.py"}},
        harness="tool_call",
    )
    (call,) = expert_turns(tool)[0].tool_calls or []
    assert call["function"]["name"] == "str_replace_editor"
    assert json.loads(call["function"]["arguments"]) == {"command": "view", "path": "a.py"}


def test_same_outcome():
    # an edit is judged by the tree it leaves, whatever it printed
    assert same_outcome({**EDIT, "output": "other", "returncode": 1}, EDIT, expert_changed_tree=True)
    assert not same_outcome({**EDIT, "patch": "diff b"}, EDIT, expert_changed_tree=True)
    # a read by its exit code and output too (and it must leave the tree as it was)
    read = {**EDIT, "patch": "", "output": "1:x"}
    assert same_outcome(read, read, expert_changed_tree=False)
    assert not same_outcome({**read, "output": ""}, read, expert_changed_tree=False)
    assert not same_outcome({**read, "returncode": 1}, read, expert_changed_tree=False)
    assert not same_outcome({**read, "patch": "diff c"}, read, expert_changed_tree=False)
    # never: a timeout, a turn that does not parse, a submission
    for bad in ({"timed_out": True}, {"format_error": "no block"}, {"submitted": True}):
        assert not same_outcome({**EDIT, **bad}, EDIT, expert_changed_tree=True)
