"""Every tool of every tool-calling harness on the in-process environment (a temporary git checkout,
no Docker): reads, edits, searches, shells, undo, and each failure the policy can cause (missing file,
a directory, a binary file, outside the repository, inside .git, a refused command), shown to it as
an error observation. Calls go through the harness as the agent makes them: a Hermes
``<tool_call>`` turn is parsed, then run by ``run_action``. The Docker twin is tests/harnesses/test_tools.py."""

from __future__ import annotations

import json
import os

import pytest

from swe_rl.agent.local_environment import init_repo, local_environment
from swe_rl.agent.protocols import PolicyTurn
from swe_rl.harnesses.codeact import CodeActHarness
from swe_rl.harnesses.codex import CodexHarness
from swe_rl.harnesses.opencode import OpenCodeHarness

UNICODE = "# Grüße, 世界 — ünïcödé ✓\nname = 'Zoë'\n"
FILES = {
    "uni.py": UNICODE,
    "blob.bin": bytes(range(256)) * 4,
    "pkg/__init__.py": "",
    "pkg/core.py": "def interleave(seqs):\n    return seqs\n\n\ndef other():\n    return None\n",
    "rep.txt": "a\nb\na\n",
}


async def call(harness, env, name: str, **arguments) -> tuple[str, int]:
    """One call the way the agent runs it: (observation text, return code)."""
    text = f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
    [action] = harness.parse(PolicyTurn(text=text))
    result = await harness.run_action(env, action, timeout=10)
    return result.output, result.returncode


@pytest.fixture
async def env(tmp_path):
    repo = init_repo(tmp_path / "src", FILES)
    async with local_environment(repo, base_dir=tmp_path) as env:
        assert (
            await env.exec("chmod 755 uni.py && git -c user.name=t -c user.email=t@t commit -qam mode")
        ).ok
        yield env


async def test_codeact_editor_and_bash(env):
    h, w = CodeActHarness(), env.workdir
    out, rc = await call(
        h, env, "str_replace_editor", command="view", path=f"{w}/pkg/core.py", view_range=[1, 2]
    )
    assert rc == 0 and out.endswith("     1\tdef interleave(seqs):\n     2\t    return seqs")
    out, rc = await call(h, env, "str_replace_editor", command="view", path=w)
    assert rc == 0 and f"{w}/pkg/core.py" in out and f"{w}/.git" not in out
    # errors: relative path, missing file, binary, a range past the end
    out, rc = await call(h, env, "str_replace_editor", command="view", path="pkg/core.py")
    assert rc != 0 and "not absolute" in out
    out, rc = await call(h, env, "str_replace_editor", command="view", path=f"{w}/nope.py")
    assert rc != 0 and out == f"Error: {w}/nope.py does not exist"
    out, rc = await call(h, env, "str_replace_editor", command="view", path=f"{w}/blob.bin")
    assert rc != 0 and "binary file (1024 bytes)" in out
    out, rc = await call(h, env, "str_replace_editor", command="view", path=f"{w}/uni.py", view_range=[1, 9])
    assert rc != 0 and "view_range end 9 is out of range" in out
    out, rc = await call(
        h, env, "str_replace_editor", command="str_replace", path=f"{w}/pkg", old_str="a", new_str="b"
    )
    assert rc != 0 and "is a directory" in out
    # str_replace: not found, several times, unique (unicode and mode kept)
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path=f"{w}/uni.py",
        old_str="name = 'Zoe'",
        new_str="x",
    )
    assert rc != 0 and out == f"Error: the old_str was not found in {w}/uni.py; no change was made"
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path=f"{w}/pkg/core.py",
        old_str="    return ",
        new_str="    return  ",
    )
    assert rc != 0 and "found 2 times" in out and "(lines 2, 6)" in out
    out, rc = await call(
        h,
        env,
        "str_replace_editor",
        command="str_replace",
        path=f"{w}/uni.py",
        old_str="name = 'Zoë'",
        new_str="name = 'Zoë ✓'\nother = '世界'",
    )
    assert rc == 0 and "     3\tother = '世界'" in out
    assert (await env.exec("stat -c %a uni.py")).output.strip() == "755"
    assert "mode" not in await env.diff()
    # insert, undo twice, nothing more to undo
    out, rc = await call(
        h, env, "str_replace_editor", command="insert", path=f"{w}/uni.py", insert_line=0, new_str="# top"
    )
    assert rc == 0 and (await env.read_file("uni.py")).startswith(b"# top\n# Gr")
    await call(h, env, "str_replace_editor", command="undo_edit", path=f"{w}/uni.py")
    await call(h, env, "str_replace_editor", command="undo_edit", path=f"{w}/uni.py")
    assert await env.read_file("uni.py") == UNICODE.encode()
    out, rc = await call(h, env, "str_replace_editor", command="undo_edit", path=f"{w}/uni.py")
    assert rc != 0 and f"no edit of {w}/uni.py to undo" in out
    # create: a new file in a new directory; no overwrite; never outside the repository or in .git
    out, rc = await call(
        h, env, "str_replace_editor", command="create", path=f"{w}/pkg/new/mod.py", file_text="VALUE = 'é'\n"
    )
    assert rc == 0 and await env.read_file("pkg/new/mod.py") == "VALUE = 'é'\n".encode()
    out, rc = await call(h, env, "str_replace_editor", command="create", path=f"{w}/uni.py", file_text="x")
    assert rc != 0 and "already exists" in out
    out, rc = await call(h, env, "str_replace_editor", command="create", path="/tmp/evil.py", file_text="x")
    assert rc != 0 and f"outside the repository {w}" in out and not os.path.exists("/tmp/evil.py")
    out, rc = await call(
        h, env, "str_replace_editor", command="str_replace", path=f"{w}/.git/config", old_str="a", new_str="b"
    )
    assert rc != 0 and "inside .git" in out
    # execute_bash: exit codes, timeouts, a refused command
    out, rc = await call(h, env, "execute_bash", command="echo hi && exit 3")
    assert rc == 3 and out == "hi\n[The command finished with exit code 3.]"
    out, rc = await call(h, env, "execute_bash", command="sleep 5", timeout=1)
    assert "killed after 1 seconds" in out
    out, rc = await call(h, env, "execute_bash", command="echo a\x00b")
    assert rc != 0 and "refused" in out and "NUL" in out


async def test_codex_tools(env):
    h, w = CodexHarness(), env.workdir
    out, rc = await call(h, env, "shell_command", command="pwd", workdir=f"{w}/pkg")
    assert rc == 0 and out.startswith("Exit code: 0\nWall time: ") and f"{w}/pkg" in out
    out, rc = await call(h, env, "shell_command", command="sleep 5", timeout_ms=300)
    assert "timed out after 300 ms" in out
    out, rc = await call(h, env, "read_file", file_path=f"{w}/uni.py")
    assert rc == 0 and out == "L1: # Grüße, 世界 — ünïcödé ✓\nL2: name = 'Zoë'"
    out, rc = await call(h, env, "read_file", file_path=f"{w}/uni.py", offset=9)
    assert rc != 0 and "offset 9 is past the end" in out
    out, rc = await call(h, env, "read_file", file_path=f"{w}/blob.bin")
    assert rc != 0 and "binary file" in out
    out, rc = await call(h, env, "read_file", file_path=f"{w}/missing.txt")
    assert rc != 0 and f"{w}/missing.txt does not exist" in out
    out, rc = await call(h, env, "read_file", file_path=f"{w}/pkg")
    assert rc != 0 and f"{w}/pkg is a directory, not a file" in out
    out, rc = await call(h, env, "list_dir", dir_path=w, depth=2)
    assert rc == 0 and out.startswith(f"Absolute path: {w}") and "  core.py" in out and "pkg/" in out
    out, rc = await call(h, env, "list_dir", dir_path=f"{w}/nope")
    assert rc != 0 and "does not exist" in out
    out, rc = await call(h, env, "list_dir", dir_path=f"{w}/uni.py")
    assert rc != 0 and "is not a directory" in out
    out, rc = await call(h, env, "grep_files", pattern="def interleave", path=w, include="*.py")
    assert rc == 0 and f"{w}/pkg/core.py" in out
    out, rc = await call(h, env, "grep_files", pattern="zzz_no_such_thing_zzz")
    assert out == "No matches found."
    patch = (
        "*** Begin Patch\n*** Update File: uni.py\n@@\n # Grüße, 世界 — ünïcödé ✓\n-name = 'Zoë'\n"
        "+name = 'Zoë'\n+greeting = 'こんにちは'\n*** Add File: docs/notes.md\n+# Notes\n"
        "*** Delete File: blob.bin\n*** End Patch"
    )
    out, rc = await call(h, env, "apply_patch", input=patch)
    assert rc == 0 and "M uni.py" in out and "A docs/notes.md" in out and "D blob.bin" in out, out
    assert (await env.read_file("uni.py")).decode().endswith("greeting = 'こんにちは'\n")
    assert (await env.exec("stat -c %a uni.py; ls")).output.split()[0] == "755"
    out, rc = await call(
        h, env, "apply_patch", input="*** Begin Patch\n*** Add File: ../x.py\n+x\n*** End Patch"
    )
    assert rc != 0 and "outside the repository" in out


async def test_opencode_tools(env):
    h, w = OpenCodeHarness(), env.workdir
    out, rc = await call(h, env, "bash", command="echo out; echo err >&2; exit 2", description="check")
    assert rc == 2 and "out" in out and "err" in out and "exit code 2" in out
    out, rc = await call(h, env, "read", file_path=f"{w}/uni.py")
    assert rc == 0 and "00001| # Grüße, 世界" in out and "00002| name = 'Zoë'" in out
    out, rc = await call(h, env, "read", file_path="blob.bin")
    assert rc != 0 and "binary file" in out
    out, rc = await call(h, env, "read", file_path="nope.txt")
    assert rc != 0 and f"{w}/nope.txt does not exist" in out
    out, rc = await call(h, env, "read", file_path="pkg")
    assert rc != 0 and "is a directory" in out
    out, rc = await call(h, env, "edit", file_path="uni.py", old_string="nobody", new_string="x")
    assert rc != 0 and f"the old_string was not found in {w}/uni.py" in out
    out, rc = await call(h, env, "edit", file_path="rep.txt", old_string="a", new_string="c")
    assert rc != 0 and "found 2 times" in out and "(lines 1, 3)" in out and "replace_all" in out
    out, rc = await call(
        h, env, "edit", file_path="rep.txt", old_string="a", new_string="c", replace_all=True
    )
    assert rc == 0 and await env.read_file("rep.txt") == b"c\nb\nc\n"
    out, rc = await call(h, env, "edit", file_path="blob.bin", old_string="a", new_string="b")
    assert rc != 0 and "binary file" in out
    out, rc = await call(h, env, "write", file_path="new/w.txt", content="w\n")
    assert rc == 0 and await env.read_file("new/w.txt") == b"w\n"
    out, rc = await call(h, env, "write", file_path="pkg", content="x")
    assert rc != 0 and "directory" in out
    out, rc = await call(h, env, "write", file_path="/etc/passwd", content="x")
    assert rc != 0 and "outside the repository" in out
    out, rc = await call(h, env, "glob", pattern="**/core.py")
    assert rc == 0 and f"{w}/pkg/core.py" in out
    out, _ = await call(h, env, "glob", pattern="*.nothing")
    assert out == "No files found."
    out, rc = await call(h, env, "grep", pattern="def interleave", include="*.py")
    assert rc == 0 and f"{w}/pkg/core.py:" in out and "Line " in out
    out, rc = await call(h, env, "grep", pattern="(unclosed")
    assert rc != 0 and "pattern" in out
    out, rc = await call(h, env, "list_dir", path=f"{w}/pkg")
    assert rc == 0 and "core.py" in out
    out, rc = await call(h, env, "list_dir", path=f"{w}/missing")
    assert rc != 0 and "does not exist" in out
    patch = await env.diff()
    assert "+w" in patch and "-a\n" in patch and "+c\n" in patch
