"""OpenHands CodeAct-style harness: ``execute_bash``, ``str_replace_editor``, ``finish``.

    harness = CodeActHarness()          # prompts: configs/harness_codeact.yaml

Tools (argument shapes as OpenHands has them):

- ``execute_bash(command, timeout?)``: one shell command from the repository (a fresh shell each
  time); ``timeout`` in seconds, capped by the agent's command timeout.
- ``str_replace_editor(command, path, file_text?, old_str?, new_str?, insert_line?, view_range?)``
  with command ``view`` (a file with line numbers, or a directory two levels deep), ``create``
  (a new file), ``str_replace`` (``old_str`` must occur exactly once), ``insert`` (``new_str`` after
  line ``insert_line``, 0 for the top) and ``undo_edit`` (the last edit of ``path``). Paths are
  absolute, as in OpenHands; changes only inside the repository.
- ``finish(message?)``: ends the episode; the patch is the container's ``git diff``.
"""

from __future__ import annotations

from typing import Any

from swe_rl.configs import config_path
from swe_rl.harnesses.tool_harness import Tool, ToolCallingHarness
from swe_rl.harnesses.tools import (
    ToolError,
    ToolOutput,
    Workspace,
    numbered,
    replace_text,
)

__all__ = ["CodeActHarness"]

VIEW_MAX_CHARS = 40_000
"""A file viewed without view_range shows its first lines up to about this many characters."""
SNIPPET_LINES = 4


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _snippet(text: str, first: int, n_new: int) -> str:
    lines = _lines(text)
    start = max(1, first - SNIPPET_LINES)
    end = min(len(lines), first + n_new + SNIPPET_LINES - 1)
    return numbered(lines[start - 1 : end], start)


class CodeActHarness(ToolCallingHarness):
    """OpenHands' CodeAct tools; submits with ``finish``."""

    name = "codeact"
    default_config = config_path("harness_codeact.yaml")

    def _tools(self) -> list[Tool]:
        return [
            Tool(
                "execute_bash",
                "Run one bash command in the repository and get its output and exit code. Each "
                "call starts a fresh shell in the repository root (cd and variables do not persist). Nothing is "
                "interactive; run long commands in the background and cap slow ones with a timeout.",
                {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The bash command to run."},
                        "timeout": {
                            "type": "number",
                            "description": "Seconds before the command is killed "
                            "(optional; capped by the episode's limit).",
                        },
                    },
                    "required": ["command"],
                },
                self._bash,
                shell=True,
            ),
            Tool(
                "str_replace_editor",
                "View, create and edit files. `view` shows a file with line numbers "
                "(`view_range` [start, end], end -1 for the last line) or lists a directory two levels deep; "
                "`create` writes a new file (`file_text`); `str_replace` replaces `old_str`, which must match "
                "exactly one place of the file, whitespace included, with `new_str`; `insert` adds `new_str` "
                "after line `insert_line` (0: at the top); `undo_edit` reverts the last edit of `path`. "
                "Paths are absolute.",
                {
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "string",
                            "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                            "description": "The operation.",
                        },
                        "path": {"type": "string", "description": "Absolute path of the file or directory."},
                        "file_text": {"type": "string", "description": "Content of the new file (`create`)."},
                        "old_str": {
                            "type": "string",
                            "description": "Exact text to replace (`str_replace`).",
                        },
                        "new_str": {
                            "type": "string",
                            "description": "Replacement (`str_replace`) or text to insert (`insert`).",
                        },
                        "insert_line": {
                            "type": "integer",
                            "description": "Line after which to insert (`insert`).",
                        },
                        "view_range": {
                            "type": "array",
                            "items": {"type": "integer"},
                            "description": "[start, end] lines to view, 1-based; end -1 for the end.",
                        },
                    },
                    "required": ["command", "path"],
                },
                self._editor,
            ),
            Tool(
                "finish",
                "Finish the task once the issue is resolved; your changes in the repository are the result.",
                {
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "description": "A short summary of what you changed."}
                    },
                    "required": [],
                },
                self._finish,
                finish=True,
            ),
        ]

    # ------------------------------------------------------------------ tools

    async def _bash(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        command = args["command"]
        if not command.strip():
            raise ToolError("the command is empty")
        timeout = self.limit(args.get("timeout"), cap)
        res = await ws.shell(command, timeout=timeout)
        out = res.output.rstrip("\n")
        if res.timed_out:
            text = (
                f"{out}\n[The command was killed after {timeout:g} seconds without finishing. Run slow commands "
                "in the background or give them a time limit.]"
            )
        else:
            text = f"{out}\n[The command finished with exit code {res.returncode}.]"
        return self.shell_output(res, text.lstrip("\n"))

    async def _finish(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        return ToolOutput(text=str(args.get("message") or "Finished."))

    async def _editor(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        command, path = args["command"], args["path"].strip()
        if not path.startswith("/"):
            raise ToolError(
                f"the path {path} is not absolute: it must start with /. Did you mean "
                f"{ws.workdir.rstrip('/')}/{path.lstrip('./')}?"
            )
        allowed = {
            "view": {"view_range"},
            "create": {"file_text"},
            "str_replace": {"old_str", "new_str"},
            "insert": {"insert_line", "new_str"},
            "undo_edit": set(),
        }[command]
        extra = sorted(set(args) - allowed - {"command", "path"})
        if extra:
            raise ToolError(f"`{command}` does not take {', '.join(extra)}")
        if command == "view":
            return await self._view(ws, path, args.get("view_range"))
        full = ws.resolve(path, inside=True)
        if command == "create":
            if "file_text" not in args:
                raise ToolError("`create` needs file_text")
            if await ws.kind(full) is not None:
                raise ToolError(
                    f"{full} already exists: `create` does not overwrite files; change it with "
                    "`str_replace` or `insert`"
                )
            await ws.write_text(full, args["file_text"], existed=False)
            return ToolOutput(text=f"Created {full}.")
        if command == "undo_edit":
            return ToolOutput(text=await ws.undo(full))
        text = await ws.read_text(full, full)
        if command == "str_replace":
            if "old_str" not in args:
                raise ToolError("`str_replace` needs old_str")
            new_str = args.get("new_str", "")
            new_text, _, first = replace_text(text, args["old_str"], new_str, path=full, old_name="old_str")
            await ws.write_text(full, new_text, existed=True, previous=text)
            return ToolOutput(
                text=f"Edited {full}. The changed region now reads (cat -n):\n"
                f"{_snippet(new_text, first, new_str.count(chr(10)) + 1)}\n"
                "Check that the change is what you intended; edit again if not."
            )
        # insert
        if "insert_line" not in args or "new_str" not in args:
            raise ToolError("`insert` needs insert_line and new_str")
        lines, at = _lines(text), args["insert_line"]
        if not 0 <= at <= len(lines):
            raise ToolError(
                f"insert_line {at} is out of range: {full} has {len(lines)} lines (use 0 to {len(lines)})"
            )
        new_lines = _lines(args["new_str"]) or [""]
        result = lines[:at] + new_lines + lines[at:]
        new_text = "\n".join(result) + ("\n" if text.endswith("\n") or not text else "")
        await ws.write_text(full, new_text, existed=True, previous=text)
        return ToolOutput(
            text=f"Inserted {len(new_lines)} line(s) after line {at} of {full}. The region now "
            f"reads (cat -n):\n{_snippet(new_text, at + 1, len(new_lines))}"
        )

    async def _view(self, ws: Workspace, path: str, view_range: list[int] | None) -> ToolOutput:
        full = ws.resolve(path)
        kind = await ws.kind(full)
        if kind is None:
            raise ToolError(f"{full} does not exist")
        if kind == "dir":
            if view_range:
                raise ToolError("view_range applies to files, not directories")
            entries = await ws.tree(full, 2, hidden=False)
            base = full.rstrip("/")
            listing = "\n".join(f"{base}/{rel}{'/' if k == 'd' else ''}" for k, rel in entries)
            return ToolOutput(
                text=f"Files and directories up to 2 levels deep in {full} (hidden ones left out):\n"
                f"{base}/\n{listing}".rstrip("\n")
            )
        text = await ws.read_text(full, full)
        lines = _lines(text)
        n = len(lines)
        if view_range:
            if len(view_range) != 2:
                raise ToolError("view_range must be two integers [start, end]")
            start, end = view_range
            if not 1 <= start <= max(n, 1):
                raise ToolError(f"view_range start {start} is out of range: {full} has {n} lines")
            if end == -1:
                end = n
            if end < start or end > n:
                raise ToolError(
                    f"view_range end {end} is out of range: it must be between {start} and {n}, "
                    "or -1 for the end of the file"
                )
            return ToolOutput(
                text=f"{full} lines {start}-{end} of {n} (cat -n):\n{numbered(lines[start - 1 : end], start)}"
            )
        shown: list[str] = []
        size = 0
        for line in lines:
            size += len(line) + 8
            if size > VIEW_MAX_CHARS and shown:
                break
            shown.append(line)
        note = (
            ""
            if len(shown) == n
            else (
                f"\n[{full} has {n} lines; only lines 1-{len(shown)} are shown. "
                "Use view_range to see the rest, or grep to find what you need.]"
            )
        )
        return ToolOutput(text=f"{full} (cat -n):\n{numbered(shown)}{note}")
