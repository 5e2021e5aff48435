"""Every tool of the tool-calling harnesses against a real container (a fixture task image leased from
a real pool over a real exec server): reads, edits, searches, shells, binary files, a 5 MB file,
unicode, missing paths and paths outside the repository. Calls go through the harness as the agent
makes them: a Hermes ``<tool_call>`` turn is parsed, then run by ``run_action``."""

from __future__ import annotations

import json

import pytest

from swe_rl.agent.fleet_environment import fleet_environment
from swe_rl.agent.protocols import PolicyTurn
from swe_rl.harnesses.codeact import CodeActHarness
from swe_rl.harnesses.codex import CodexHarness
from swe_rl.harnesses.opencode import OpenCodeHarness

TOOLZ = "pytoolz__toolz-9001"
UNICODE = "# Grüße, 世界 — ünïcödé ✓\nname = 'Zoë'\n"


async def call(harness, env, name: str, **arguments) -> tuple[str, int]:
    """One call the way the agent runs it: (observation text, return code)."""
    text = f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
    [action] = harness.parse(PolicyTurn(text=text))
    result = await harness.run_action(env, action, timeout=60)
    return result.output, result.returncode


@pytest.fixture
async def env(client, fixture_instances):
    async with fleet_environment(client, fixture_instances[TOOLZ]) as env:
        # a binary file, a 5 MB text file and a unicode file inside the repository
        await env.write_file("/testbed/blob.bin", bytes(range(256)) * 4)
        big = "".join(f"line {i:07d} {'x' * 40}\n" for i in range(1, 100_001))
        assert len(big) > 5_000_000
        await env.write_file("/testbed/big.txt", big)
        await env.write_file("/testbed/uni.py", UNICODE)
        await env.exec(
            "chmod 755 /testbed/uni.py && git -C /testbed add -A && git -C /testbed -c user.email=t@t "
            "-c user.name=t commit -qm fixtures"
        )
        yield env


async def diff_lines(env) -> list[str]:
    return [
        line
        for line in (await env.diff()).splitlines()
        if line.startswith(("+", "-", "old mode", "new mode"))
    ]


async def test_codeact_editor_and_bash(env):
    h = CodeActHarness()
    # view: a file with line numbers, a range, a directory
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="view",
        path="/testbed/toolz/itertoolz.py",
        view_range=[245, 246],
    )
    assert rc == 0 and "   245\t            iters = itertools.takewhile(predicate, iters)" in out
    out, rc = await call(h, env, "str_replace_editor", command="view", path="/testbed")
    assert rc == 0 and "/testbed/toolz/itertoolz.py" in out and "/testbed/.git" not in out
    out, _ = await call(h, env, "str_replace_editor", command="view", path="/testbed/uni.py")
    assert "Grüße, 世界" in out and "     2\tname = 'Zoë'" in out
    # errors: relative path, missing file, binary, a range past the end
    out, rc = await call(h, env, "str_replace_editor", command="view", path="toolz/itertoolz.py")
    assert rc != 0 and "not absolute" in out and "/testbed/toolz/itertoolz.py" in out
    out, rc = await call(h, env, "str_replace_editor", command="view", path="/testbed/nope.py")
    assert rc != 0 and out == "Error: /testbed/nope.py does not exist"
    out, rc = await call(h, env, "str_replace_editor", command="view", path="/testbed/blob.bin")
    assert rc != 0 and "binary file (1024 bytes)" in out
    out, rc = await call(
        h, env, "str_replace_editor", command="view", path="/testbed/uni.py", view_range=[1, 9]
    )
    assert rc != 0 and "view_range end 9 is out of range" in out
    # a 5 MB file: the head is shown with a note, ranges anywhere
    out, rc = await call(h, env, "str_replace_editor", command="view", path="/testbed/big.txt")
    assert (
        rc == 0 and "line 0000001" in out and "has 100000 lines; only lines 1-" in out and len(out) < 50_000
    )
    out, _ = await call(
        h, env, "str_replace_editor", command="view", path="/testbed/big.txt", view_range=[99999, -1]
    )
    assert " 99999\tline 0099999" in out and "100000\tline 0100000" in out

    # str_replace: not found, found several times, unique (unicode kept, mode kept)
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path="/testbed/uni.py",
        old_str="name = 'Zoe'",
        new_str="x",
    )
    assert rc != 0 and out == "Error: the old_str was not found in /testbed/uni.py; no change was made"
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path="/testbed/toolz/itertoolz.py",
        old_str="return",
        new_str="return",
    )
    assert rc != 0 and "the same" in out
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path="/testbed/toolz/itertoolz.py",
        old_str="    return ",
        new_str="    return  ",
    )
    assert rc != 0 and "was found" in out and "times in /testbed/toolz/itertoolz.py (lines " in out
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path="/testbed/uni.py",
        old_str="name = 'Zoë'",
        new_str="name = 'Zoë ✓'\nother = '世界'",
    )
    assert rc == 0 and "     3\tother = '世界'" in out
    assert await env.read_file("/testbed/uni.py") == (
        UNICODE.replace("name = 'Zoë'", "name = 'Zoë ✓'\nother = '世界'").encode()
    )
    assert (await env.exec("stat -c %a /testbed/uni.py")).output.strip() == "755"
    assert not [line for line in await diff_lines(env) if "mode" in line]
    # insert, undo, undo again, nothing more to undo
    out, rc = await call(
        h, env, "str_replace_editor", command="insert", path="/testbed/uni.py", insert_line=0, new_str="# top"
    )
    assert rc == 0 and (await env.read_file("/testbed/uni.py")).startswith(b"# top\n# Gr")
    out, rc = await call(
        h, env, "str_replace_editor", command="insert", path="/testbed/uni.py", insert_line=99, new_str="x"
    )
    assert rc != 0 and "insert_line 99 is out of range" in out
    await call(h, env, "str_replace_editor", command="undo_edit", path="/testbed/uni.py")
    await call(h, env, "str_replace_editor", command="undo_edit", path="/testbed/uni.py")
    assert await env.read_file("/testbed/uni.py") == UNICODE.encode()
    out, rc = await call(h, env, "str_replace_editor", command="undo_edit", path="/testbed/uni.py")
    assert rc != 0 and "no edit of /testbed/uni.py to undo" in out
    # create: new file in a new directory; no overwrite; never outside the repository or in .git
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="create",
        path="/testbed/pkg/new/mod.py",
        file_text="VALUE = 'é'\n",
    )
    assert rc == 0 and await env.read_file("/testbed/pkg/new/mod.py") == "VALUE = 'é'\n".encode()
    out, rc = await call(
        h, env, "str_replace_editor", command="create", path="/testbed/uni.py", file_text="x"
    )
    assert rc != 0 and "already exists" in out
    out, rc = await call(h, env, "str_replace_editor", command="create", path="/tmp/evil.py", file_text="x")
    assert rc != 0 and "outside the repository /testbed" in out
    out, rc = await call(
        h, env, "str_replace_editor", command="create", path="/testbed/../etc/x", file_text="x"
    )
    assert rc != 0 and "outside the repository" in out
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path="/testbed/.git/config",
        old_str="a",
        new_str="b",
    )
    assert rc != 0 and "inside .git" in out
    # execute_bash: exit codes, timeouts
    out, rc = await call(h, env, "execute_bash", command="echo hi && exit 3")
    assert rc == 3 and out == "hi\n[The command finished with exit code 3.]"
    out, rc = await call(h, env, "execute_bash", command="sleep 5", timeout=1)
    assert "killed after 1 seconds" in out


async def test_codex_tools(env):
    h = CodexHarness()
    out, rc = await call(
        h, env, "shell_command", command="pwd && ls toolz | head -3", workdir="/testbed/toolz"
    )
    assert rc == 0 and out.startswith("Exit code: 0\nWall time: ") and "/testbed/toolz" in out
    out, rc = await call(h, env, "shell_command", command="sleep 5", timeout_ms=500)
    assert "timed out after 500 ms" in out
    # read_file: L-numbered lines, offset/limit, errors
    out, rc = await call(h, env, "read_file", file_path="/testbed/uni.py")
    assert rc == 0 and out == "L1: # Grüße, 世界 — ünïcödé ✓\nL2: name = 'Zoë'"
    out, _ = await call(h, env, "read_file", file_path="/testbed/big.txt", offset=50_000, limit=2)
    assert out.startswith("L50000: line 0050000") and "L50001: line 0050001" in out
    out, rc = await call(h, env, "read_file", file_path="/testbed/big.txt", offset=200_000)
    assert rc != 0 and "offset 200000 is past the end" in out
    out, rc = await call(h, env, "read_file", file_path="/testbed/blob.bin")
    assert rc != 0 and "binary file" in out
    out, rc = await call(h, env, "read_file", file_path="/testbed/missing.txt")
    assert rc != 0 and "/testbed/missing.txt does not exist" in out
    # list_dir and grep_files
    out, rc = await call(h, env, "list_dir", dir_path="/testbed", depth=2)
    assert (
        rc == 0 and out.startswith("Absolute path: /testbed") and "  itertoolz.py" in out and "toolz/" in out
    )
    out, rc = await call(h, env, "list_dir", dir_path="/testbed/nope")
    assert rc != 0 and "does not exist" in out
    out, rc = await call(h, env, "grep_files", pattern="def interleave", path="/testbed", include="*.py")
    assert rc == 0 and "/testbed/toolz/itertoolz.py" in out
    out, rc = await call(h, env, "grep_files", pattern="zzz_no_such_thing_zzz")
    assert out == "No matches found."
    # apply_patch: update (unicode), add, delete, move; context mismatch; outside the repository
    patch = (
        "*** Begin Patch\n*** Update File: uni.py\n@@\n # Grüße, 世界 — ünïcödé ✓\n-name = 'Zoë'\n"
        "+name = 'Zoë'\n+greeting = 'こんにちは'\n*** Add File: docs/notes.md\n+# Notes\n+ok\n"
        "*** Delete File: blob.bin\n*** End Patch"
    )
    out, rc = await call(h, env, "apply_patch", input=patch)
    assert rc == 0 and "M uni.py" in out and "A docs/notes.md" in out and "D blob.bin" in out, out
    assert (
        (await env.read_file("/testbed/uni.py")).decode().endswith("name = 'Zoë'\ngreeting = 'こんにちは'\n")
    )
    assert await env.read_file("/testbed/docs/notes.md") == b"# Notes\nok\n"
    assert "blob.bin" not in (await env.exec("ls /testbed")).output
    assert (await env.exec("stat -c %a /testbed/uni.py")).output.strip() == "755"
    bad = "*** Begin Patch\n*** Update File: uni.py\n@@\n-name = 'Nobody'\n+x\n*** End Patch"
    out, rc = await call(h, env, "apply_patch", input=bad)
    assert (
        rc != 0 and "hunk 1 of uni.py: the expected lines were not found" in out and "name = 'Nobody'" in out
    )
    out, rc = await call(
        h, env, "apply_patch", input="*** Begin Patch\n*** Add File: ../x.py\n+x\n*** End Patch"
    )
    assert rc != 0 and "outside the repository" in out
    out, rc = await call(h, env, "apply_patch", input="*** Update File: uni.py\n")
    assert rc != 0 and "must start with the line '*** Begin Patch'" in out
    # all or nothing: a failing second file leaves the first untouched
    before = await env.read_file("/testbed/uni.py")
    out, rc = await call(
        h,
        env,
        "apply_patch",
        input="*** Begin Patch\n*** Update File: uni.py\n@@\n-name = 'Zoë'\n"
        "+name = 'Z'\n*** Update File: missing.py\n@@\n-a\n+b\n*** End Patch",
    )
    assert rc != 0 and "missing.py does not exist" in out and await env.read_file("/testbed/uni.py") == before


async def test_opencode_tools(env):
    h = OpenCodeHarness()
    out, rc = await call(h, env, "bash", command="echo out; echo err >&2; exit 2", description="check")
    assert rc == 2 and "out" in out and "err" in out and "exit code 2" in out
    out, rc = await call(h, env, "read", file_path="/testbed/uni.py")
    assert rc == 0 and "00001| # Grüße, 世界" in out and "00002| name = 'Zoë'" in out
    out, _ = await call(h, env, "read", file_path="/testbed/big.txt", offset=99_998, limit=5)
    assert "99999| line 0099999" in out and "100000| line 0100000" in out
    out, rc = await call(h, env, "read", file_path="/testbed/blob.bin")
    assert rc != 0 and "binary file" in out
    out, rc = await call(h, env, "read", file_path="nope.txt")
    assert rc != 0 and "/testbed/nope.txt does not exist" in out
    # edit: not found, several times, replace_all, unique
    out, rc = await call(h, env, "edit", file_path="uni.py", old_string="nobody", new_string="x")
    assert rc != 0 and "the old_string was not found in /testbed/uni.py" in out
    await call(h, env, "write", file_path="rep.txt", content="a\nb\na\n")
    out, rc = await call(h, env, "edit", file_path="rep.txt", old_string="a", new_string="c")
    assert rc != 0 and "found 2 times" in out and "(lines 1, 3)" in out and "replace_all" in out
    out, rc = await call(
        h, env, "edit", file_path="rep.txt", old_string="a", new_string="c", replace_all=True
    )
    assert rc == 0 and await env.read_file("/testbed/rep.txt") == b"c\nb\nc\n"
    out, rc = await call(h, env, "edit", file_path="/testbed/uni.py", old_string="Zoë", new_string="Zoé")
    assert rc == 0 and "Zoé".encode() in await env.read_file("/testbed/uni.py")
    out, rc = await call(h, env, "write", file_path="/etc/passwd", content="x")
    assert rc != 0 and "outside the repository" in out
    out, rc = await call(h, env, "edit", file_path="/testbed/blob.bin", old_string="a", new_string="b")
    assert rc != 0 and "binary file" in out
    # glob, grep, list_dir
    out, rc = await call(h, env, "glob", pattern="**/itertoolz.py")
    assert rc == 0 and "/testbed/toolz/itertoolz.py" in out
    out, _ = await call(h, env, "glob", pattern="*.nothing")
    assert out == "No files found."
    out, rc = await call(h, env, "grep", pattern="def interleave", include="*.py")
    assert rc == 0 and "/testbed/toolz/itertoolz.py:" in out and "Line " in out
    out, rc = await call(h, env, "grep", pattern="(unclosed")
    assert rc != 0 and "pattern" in out
    out, rc = await call(h, env, "list_dir", path="/testbed/toolz")
    assert rc == 0 and "itertoolz.py" in out
    out, rc = await call(h, env, "list_dir", path="/testbed/missing")
    assert rc != 0 and "does not exist" in out
