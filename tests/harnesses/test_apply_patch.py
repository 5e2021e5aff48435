"""``apply_patch`` edge cases on the in-process environment (no Docker): parse errors with their
line, anchors, end-of-file hunks, whitespace-tolerant matching, moves, adds over existing files,
directories, binary and missing targets, paths outside the repository or in .git, and all or nothing."""

from __future__ import annotations

import re

import pytest

from swe_rl.agent.local_environment import init_repo, local_environment
from swe_rl.harnesses.apply_patch import PatchError, apply_hunks, apply_patch, parse_patch
from swe_rl.harnesses.tools import ToolError, Workspace

FILES = {
    "a.py": "def f():\n    x = 1\n    return x\n\n\ndef g():\n    x = 1\n    return x\n",
    "tail.txt": "one\ntwo\nend\n",
    "noeol.txt": "no newline",
    "blob.bin": b"\x00\x01\x02",
    "pkg/m.py": "M = 1\n",
}


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"])


@pytest.fixture
async def ws(tmp_path):
    repo = init_repo(tmp_path / "src", FILES)
    async with local_environment(repo, base_dir=tmp_path) as env:
        yield await Workspace.of(env)


@pytest.mark.parametrize(
    "text, message",
    [
        ("*** Update File: a.py\n", "must start with the line '*** Begin Patch'"),
        ("*** Begin Patch\n*** Add File: x\n+x\n", "must end with the line '*** End Patch'"),
        (patch(), "changes no file"),
        (
            patch("*** Add File: x.py", "not a plus line"),
            "patch line 3: every line of an added file starts with '+'",
        ),
        (patch("*** Update File: a.py"), "has no hunks"),
        (patch("*** Update File: a.py", "@@", "@@ g"), "hunk 1 of a.py is empty"),
        (patch("*** Update File: a.py", "*** End of File"), "'*** End of File' outside a hunk"),
        (patch("*** Update File: a.py", "@@", "?x"), "a hunk line starts with ' ', '-' or '+'"),
        (patch("*** Rename File: a.py"), "patch line 2: expected"),
    ],
)
def test_malformed_patches_say_what_is_wrong(text, message):
    with pytest.raises(PatchError, match=re.escape(message)):
        parse_patch(text)


def test_a_heredoc_wrapper_and_crlf_are_tolerated():
    [op] = parse_patch(
        "apply_patch <<'EOF'\r\n*** Begin Patch\r\n*** Delete File: a.py\r\n*** End Patch\r\nEOF"
    )
    assert (op.kind, op.path) == ("delete", "a.py")


def test_hunks_anchor_eof_and_whitespace():
    text = FILES["a.py"]
    [op] = parse_patch(patch("*** Update File: a.py", "@@ def g():", "-    x = 1", "+    x = 2"))
    assert apply_hunks(text, op.hunks, "a.py").endswith("def g():\n    x = 2\n    return x\n")
    [op] = parse_patch(patch("*** Update File: a.py", "@@", "-    x = 1", "+    x = 2"))  # first match only
    assert apply_hunks(text, op.hunks, "a.py").startswith("def f():\n    x = 2\n")
    [op] = parse_patch(
        patch("*** Update File: a.py", "@@", "-x = 1   ", "+    x = 3")
    )  # surrounding whitespace
    assert "    x = 3\n" in apply_hunks(text, op.hunks, "a.py")
    [op] = parse_patch(patch("*** Update File: t", "@@", " end", "+after", "*** End of File"))
    assert apply_hunks("end\nmid\nend\n", op.hunks, "t") == "end\nmid\nend\nafter\n"
    [op] = parse_patch(patch("*** Update File: t", "@@", "-no newline", "+still none"))
    assert apply_hunks("no newline", op.hunks, "t") == "still none"
    [op] = parse_patch(patch("*** Update File: a.py", "@@ def nowhere():", "-x", "+y"))
    with pytest.raises(PatchError, match="its @@ line 'def nowhere\\(\\):' was not found"):
        apply_hunks(text, op.hunks, "a.py")
    [op] = parse_patch(patch("*** Update File: a.py", "@@ def g():", "-def f():", "+def h():"))
    with pytest.raises(PatchError, match="hunk 1 of a.py: the expected lines were not found after line 6"):
        apply_hunks(text, op.hunks, "a.py")


async def test_add_update_delete_move(ws):
    summary = await apply_patch(
        ws,
        patch(
            "*** Add File: new/n.py",
            "+N = 1",
            "*** Update File: tail.txt",
            "@@",
            " two",
            "-end",
            "+END",
            "*** Delete File: blob.bin",
            "*** Update File: pkg/m.py",
            "*** Move to: pkg/moved.py",
            "@@",
            "-M = 1",
            "+M = 2",
        ),
    )
    assert summary.splitlines() == [
        "A new/n.py",
        "M tail.txt",
        "D blob.bin",
        "M pkg/moved.py (moved from pkg/m.py)",
    ]
    env = ws.env
    assert (
        await env.read_file("new/n.py") == b"N = 1\n"
        and await env.read_file("tail.txt") == b"one\ntwo\nEND\n"
    )
    assert await env.read_file("pkg/moved.py") == b"M = 2\n"
    assert (await env.exec("ls blob.bin pkg/m.py")).returncode != 0
    empty = await apply_patch(ws, patch("*** Add File: empty.txt"))
    assert empty == "A empty.txt" and await env.read_file("empty.txt") == b""


@pytest.mark.parametrize(
    "body, message",
    [
        (("*** Add File: a.py", "+x"), "cannot add a.py: it already exists"),
        (("*** Add File: pkg", "+x"), "cannot add pkg: it already exists"),
        (("*** Update File: missing.py", "@@", "-a", "+b"), "missing.py does not exist"),
        (("*** Update File: pkg", "@@", "-a", "+b"), "pkg is a directory, not a file"),
        (("*** Update File: blob.bin", "@@", "-a", "+b"), "blob.bin is a binary file"),
        (("*** Delete File: gone.py",), "gone.py does not exist"),
        (("*** Delete File: pkg",), "pkg is a directory"),
        (
            ("*** Update File: a.py", "*** Move to: tail.txt", "@@", "-def f():", "+def h():"),
            "cannot move a.py to tail.txt: it already exists",
        ),
        (("*** Add File: ../escape.py", "+x"), "outside the repository"),
        (("*** Add File: /etc/x.py", "+x"), "outside the repository"),
        (("*** Add File: .git/hooks/post-commit", "+x"), "inside .git"),
    ],
)
async def test_failures_change_nothing(ws, body, message):
    before = await ws.env.diff()
    with pytest.raises(ToolError, match=re.escape(message)):  # PatchError, or the Workspace's own ToolError
        await apply_patch(ws, patch("*** Update File: tail.txt", "@@", "-one", "+ONE", *body))
    assert await ws.env.diff() == before == ""
