"""Codex CLI-style harness: ``shell_command``, ``apply_patch``, ``read_file``, ``list_dir``, ``grep_files``.

    harness = CodexHarness()            # prompts: configs/harness_codex.yaml

Tools (argument shapes as Codex has them):

- ``shell_command(command, workdir?, timeout_ms?)``: a shell command (from ``workdir``, default the
  repository); output as ``Exit code / Wall time / Output``. Submitting is running the submit
  command through it (its output starts with the sentinel).
- ``apply_patch(input)``: a patch in Codex's format (``*** Begin Patch`` ... ``*** End Patch``,
  see `swe_rl.harnesses.apply_patch`), applied all or nothing.
- ``read_file(file_path, offset?, limit?)``: lines as ``L<n>: text`` from line ``offset`` (1-based).
- ``list_dir(dir_path, offset?, limit?, depth?)``: entries, indented by depth.
- ``grep_files(pattern, include?, path?, limit?)``: the files whose contents match a regex.
"""

from __future__ import annotations

from typing import Any

from swe_rl.configs import config_path
from swe_rl.harnesses.apply_patch import apply_patch
from swe_rl.harnesses.tool_harness import Tool, ToolCallingHarness
from swe_rl.harnesses.tools import ToolError, ToolOutput, Workspace, grep, render_tree

__all__ = ["CodexHarness"]

MAX_LINE_CHARS = 500
"""read_file cuts longer lines."""


class CodexHarness(ToolCallingHarness):
    """Codex's tools; submits with the sentinel command through ``shell_command``."""

    name = "codex"
    default_config = config_path("harness_codex.yaml")

    def _tools(self) -> list[Tool]:
        return [
            Tool(
                "shell_command",
                "Runs a shell command and returns its output. Each call starts a fresh shell; "
                "set `workdir` instead of using cd.",
                {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The shell script to execute."},
                        "workdir": {
                            "type": "string",
                            "description": "The working directory (default: the repository root).",
                        },
                        "timeout_ms": {
                            "type": "integer",
                            "description": "The timeout for the command in milliseconds.",
                        },
                    },
                    "required": ["command"],
                },
                self._shell,
                shell=True,
            ),
            Tool(
                "apply_patch",
                "Edit files with a patch: `*** Begin Patch`, then for each file `*** Add File: "
                "<path>` (lines prefixed with +), `*** Delete File: <path>` or `*** Update File: <path>` (optionally "
                "`*** Move to: <path>`) with hunks that start with `@@` (optionally followed by a line to find "
                "first) and hold context lines (prefix space), removed lines (-) and added lines (+), then "
                "`*** End Patch`. Paths are relative to the repository root.",
                {
                    "type": "object",
                    "properties": {
                        "input": {"type": "string", "description": "The entire contents of the patch."}
                    },
                    "required": ["input"],
                },
                self._apply_patch,
            ),
            Tool(
                "read_file",
                "Reads a file and returns its lines numbered as `L<n>: `.",
                {
                    "type": "object",
                    "properties": {
                        "file_path": {"type": "string", "description": "Absolute path to the file."},
                        "offset": {
                            "type": "integer",
                            "description": "The line number to start from (1-based).",
                        },
                        "limit": {"type": "integer", "description": "The maximum number of lines to return."},
                    },
                    "required": ["file_path"],
                },
                self._read_file,
            ),
            Tool(
                "list_dir",
                "Lists entries of a directory, indented by depth (directories end with /).",
                {
                    "type": "object",
                    "properties": {
                        "dir_path": {"type": "string", "description": "Absolute path to the directory."},
                        "offset": {
                            "type": "integer",
                            "description": "The entry number to start from (1-based).",
                        },
                        "limit": {
                            "type": "integer",
                            "description": "The maximum number of entries to return.",
                        },
                        "depth": {
                            "type": "integer",
                            "description": "The maximum directory depth to traverse.",
                        },
                    },
                    "required": ["dir_path"],
                },
                self._list_dir,
            ),
            Tool(
                "grep_files",
                "Finds files whose contents match the pattern (an extended regular expression).",
                {
                    "type": "object",
                    "properties": {
                        "pattern": {
                            "type": "string",
                            "description": "Regular expression pattern to search for.",
                        },
                        "include": {
                            "type": "string",
                            "description": 'Glob of the file names to search, e.g. "*.py".',
                        },
                        "path": {
                            "type": "string",
                            "description": "Directory or file to search (default: the repository root).",
                        },
                        "limit": {
                            "type": "integer",
                            "description": "The maximum number of file paths to return.",
                        },
                    },
                    "required": ["pattern"],
                },
                self._grep_files,
            ),
        ]

    async def _shell(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        command = args["command"]
        if not command.strip():
            raise ToolError("the command is empty")
        ms = args.get("timeout_ms")
        timeout = self.limit(ms / 1000 if ms else None, cap)
        workdir = ws.resolve(args["workdir"], what="workdir") if args.get("workdir") else None
        res = await ws.shell(command, timeout=timeout, workdir=workdir)
        head = f"Exit code: {res.returncode}\nWall time: {res.duration:.1f} seconds\n"
        if res.timed_out:
            head += f"command timed out after {int((timeout or 0) * 1000)} ms\n"
        return self.shell_output(res, f"{head}Output:\n{res.output.rstrip(chr(10))}")

    async def _apply_patch(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        summary = await apply_patch(ws, args["input"])
        return ToolOutput(text=f"Success. Updated the following files:\n{summary}")

    async def _read_file(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        full = ws.resolve(args["file_path"], what="file_path")
        offset, limit = args.get("offset", 1), args.get("limit", 2000)
        if offset < 1:
            raise ToolError("offset must be 1 or more")
        if limit < 1:
            raise ToolError("limit must be 1 or more")
        lines = (await ws.read_text(full)).splitlines()
        if offset > len(lines):
            raise ToolError(f"offset {offset} is past the end of the file ({len(lines)} lines)")
        out = [
            f"L{n}: {line[:MAX_LINE_CHARS]}"
            for n, line in enumerate(lines[offset - 1 : offset - 1 + limit], offset)
        ]
        return ToolOutput(text="\n".join(out))

    async def _list_dir(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        full = ws.resolve(args["dir_path"], what="dir_path")
        offset, limit, depth = args.get("offset", 1), args.get("limit", 25), args.get("depth", 2)
        if offset < 1 or limit < 1 or depth < 1:
            raise ToolError("offset, limit and depth must be 1 or more")
        lines = render_tree(await ws.tree(full, min(depth, 10)))
        if offset > max(len(lines), 1):
            raise ToolError(f"offset {offset} is past the last entry ({len(lines)} entries)")
        page = lines[offset - 1 : offset - 1 + limit]
        more = f"\nMore than {limit} entries found" if offset - 1 + limit < len(lines) else ""
        return ToolOutput(text=f"Absolute path: {full}\n" + "\n".join(page) + more)

    async def _grep_files(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        root = ws.resolve(args.get("path") or ws.workdir, what="path")
        limit = min(max(1, args.get("limit", 100)), 2000)
        files, more = await grep(
            ws, args["pattern"], root, include=args.get("include"), files_only=True, limit=limit
        )
        if not files:
            return ToolOutput(text="No matches found.")
        return ToolOutput(text="\n".join(files) + (f"\n[more than {limit} files matched]" if more else ""))
