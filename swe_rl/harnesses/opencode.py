"""OpenCode-style harness: ``bash``, ``read``, ``write``, ``edit``, ``glob``, ``grep``, ``list_dir``.

    harness = OpenCodeHarness()         # prompts: configs/harness_opencode.yaml

Tools:

- ``bash(command, timeout?, description?)``: a shell command from the repository; ``timeout`` in
  milliseconds. Submitting is running the submit command through it.
- ``read(file_path, offset?, limit?)``: lines numbered ``00001| text`` from line ``offset`` (0-based).
- ``write(file_path, content)``: creates or overwrites a file.
- ``edit(file_path, old_string, new_string, replace_all?)``: exact replacement; ``old_string`` must
  be unique unless ``replace_all``; an empty ``old_string`` creates a new file.
- ``glob(pattern, path?)``: files matching a glob (``**`` for any depth).
- ``grep(pattern, path?, include?)``: matching lines grouped by file.
- ``list_dir(path?, ignore?)``: the tree under a directory (common build and cache folders left out).
"""

from __future__ import annotations

import fnmatch
from typing import Any

from swe_rl.configs import config_path
from swe_rl.harnesses.tool_harness import Tool, ToolCallingHarness
from swe_rl.harnesses.tools import (
    ToolError,
    ToolOutput,
    Workspace,
    glob_to_regex,
    grep,
    render_tree,
    replace_text,
)

__all__ = ["OpenCodeHarness"]

RESULT_LIMIT = 100
MAX_LINE_CHARS = 2000
DEFAULT_IGNORE = (
    "__pycache__",
    "node_modules",
    ".tox",
    ".venv",
    "venv",
    "dist",
    "build",
    ".mypy_cache",
    ".pytest_cache",
    "*.egg-info",
)


class OpenCodeHarness(ToolCallingHarness):
    """OpenCode's tools; submits with the sentinel command through ``bash``."""

    name = "opencode"
    default_config = config_path("harness_opencode.yaml")

    def _tools(self) -> list[Tool]:
        path = {
            "type": "string",
            "description": "Path of the file (absolute, or relative to the repository root).",
        }
        return [
            Tool(
                "bash",
                "Executes a bash command in a fresh shell from the repository root and returns its output.",
                {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The command to execute."},
                        "timeout": {"type": "integer", "description": "Optional timeout in milliseconds."},
                        "description": {
                            "type": "string",
                            "description": "What the command does, in 5-10 words.",
                        },
                    },
                    "required": ["command"],
                },
                self._bash,
                shell=True,
            ),
            Tool(
                "read",
                "Reads a file; lines are numbered `00001| `.",
                {
                    "type": "object",
                    "properties": {
                        "file_path": path,
                        "offset": {
                            "type": "integer",
                            "description": "The line number to start reading from (0-based).",
                        },
                        "limit": {
                            "type": "integer",
                            "description": "The number of lines to read (default 2000).",
                        },
                    },
                    "required": ["file_path"],
                },
                self._read,
            ),
            Tool(
                "write",
                "Writes a file, replacing it if it exists.",
                {
                    "type": "object",
                    "properties": {
                        "file_path": path,
                        "content": {"type": "string", "description": "The content to write."},
                    },
                    "required": ["file_path", "content"],
                },
                self._write,
            ),
            Tool(
                "edit",
                "Replaces old_string with new_string in a file. old_string must match exactly (whitespace "
                "included) and be unique in the file unless replace_all is true.",
                {
                    "type": "object",
                    "properties": {
                        "file_path": path,
                        "old_string": {"type": "string", "description": "The text to replace."},
                        "new_string": {"type": "string", "description": "The text to replace it with."},
                        "replace_all": {
                            "type": "boolean",
                            "description": "Replace every occurrence (default false).",
                        },
                    },
                    "required": ["file_path", "old_string", "new_string"],
                },
                self._edit,
            ),
            Tool(
                "glob",
                'Finds files by name with a glob pattern such as "**/*.py" or "src/**/test_*.py".',
                {
                    "type": "object",
                    "properties": {
                        "pattern": {
                            "type": "string",
                            "description": "The glob pattern to match files against.",
                        },
                        "path": {
                            "type": "string",
                            "description": "The directory to search in (default: the repository root).",
                        },
                    },
                    "required": ["pattern"],
                },
                self._glob,
            ),
            Tool(
                "grep",
                "Searches file contents with an extended regular expression; matches grouped by file.",
                {
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string", "description": "The regex pattern to search for."},
                        "path": {
                            "type": "string",
                            "description": "The directory to search in (default: the repository root).",
                        },
                        "include": {"type": "string", "description": 'File pattern to include, e.g. "*.py".'},
                    },
                    "required": ["pattern"],
                },
                self._grep,
            ),
            Tool(
                "list_dir",
                "Lists files and directories under a path as a tree.",
                {
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "The directory to list (default: the repository root).",
                        },
                        "ignore": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "Glob patterns of names to leave out.",
                        },
                    },
                    "required": [],
                },
                self._list_dir,
            ),
        ]

    async def _bash(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        command = args["command"]
        if not command.strip():
            raise ToolError("the command is empty")
        ms = args.get("timeout")
        timeout = self.limit(ms / 1000 if ms else None, cap)
        res = await ws.shell(command, timeout=timeout)
        out = res.output.rstrip("\n")
        tail = (
            f"(killed after {int((timeout or 0) * 1000)} ms timeout)"
            if res.timed_out
            else f"(exit code {res.returncode})"
        )
        return self.shell_output(res, f"{out}\n{tail}" if out else tail)

    async def _read(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        full = ws.resolve(args["file_path"], what="file_path")
        offset, limit = args.get("offset", 0), args.get("limit", 2000)
        if offset < 0 or limit < 1:
            raise ToolError("offset must be 0 or more and limit 1 or more")
        lines = (await ws.read_text(full)).splitlines()
        if offset >= max(len(lines), 1):
            raise ToolError(f"offset {offset} is past the end of {full} ({len(lines)} lines)")
        page = lines[offset : offset + limit]
        body = "\n".join(f"{n:05d}| {line[:MAX_LINE_CHARS]}" for n, line in enumerate(page, offset + 1))
        end = offset + len(page)
        note = (
            f"(File has more lines. Use 'offset' to read beyond line {end})"
            if end < len(lines)
            else f"(End of file - total {len(lines)} lines)"
        )
        return ToolOutput(text=f"<file>\n{body}\n\n{note}\n</file>")

    async def _write(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        full = ws.resolve(args["file_path"], inside=True, what="file_path")
        kind = await ws.kind(full)
        if kind == "dir":
            raise ToolError(f"{full} is a directory")
        await ws.write_text(full, args["content"], existed=kind == "file")
        return ToolOutput(text=f"Wrote {len(args['content'].encode())} bytes to {full}.")

    async def _edit(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        full = ws.resolve(args["file_path"], inside=True, what="file_path")
        old, new = args["old_string"], args["new_string"]
        if old == "":
            if await ws.kind(full) is not None:
                raise ToolError(f"old_string is empty but {full} exists: give the exact text to replace")
            await ws.write_text(full, new, existed=False)
            return ToolOutput(text=f"Created {full}.")
        text = await ws.read_text(full)
        new_text, count, first = replace_text(
            text, old, new, path=full, replace_all=bool(args.get("replace_all")), old_name="old_string"
        )
        await ws.write_text(full, new_text, existed=True, previous=text)
        return ToolOutput(
            text=f"Edited {full}: {count} replacement{'s' if count != 1 else ''} (first at line {first})."
        )

    async def _glob(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        root = ws.resolve(args.get("path") or ws.workdir, what="path")
        if await ws.kind(root) != "dir":
            raise ToolError(f"{root} is not a directory" if await ws.kind(root) else f"{root} does not exist")
        pattern = args["pattern"]
        if pattern.startswith(root.rstrip("/") + "/"):
            pattern = pattern[len(root.rstrip("/")) + 1 :]
        regex = glob_to_regex(pattern.lstrip("./") if pattern.startswith("./") else pattern)
        found = [f"{root.rstrip('/')}/{rel}" for rel in await ws.files(root) if regex.match(rel)]
        if not found:
            return ToolOutput(text="No files found.")
        more = len(found) > RESULT_LIMIT
        return ToolOutput(
            text="\n".join(found[:RESULT_LIMIT])
            + (
                f"\n(Results are truncated: {len(found)} files matched. Use a more specific path or pattern.)"
                if more
                else ""
            )
        )

    async def _grep(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        root = ws.resolve(args.get("path") or ws.workdir, what="path")
        lines, more = await grep(ws, args["pattern"], root, include=args.get("include"), limit=RESULT_LIMIT)
        if not lines:
            return ToolOutput(text="No files found.")
        by_file: dict[str, list[str]] = {}
        for line in lines:
            path, _, rest = line.partition(":")
            number, _, text = rest.partition(":")
            by_file.setdefault(path, []).append(f"  Line {number}: {text[:MAX_LINE_CHARS]}")
        out = [f"Found {len(lines)}{'+' if more else ''} matches"]
        for path, found in by_file.items():
            out += ["", f"{path}:", *found]
        if more:
            out.append(
                f"\n(Results are truncated at {RESULT_LIMIT} matches. Use a more specific path or pattern.)"
            )
        return ToolOutput(text="\n".join(out))

    async def _list_dir(self, ws: Workspace, args: dict[str, Any], cap: float | None) -> ToolOutput:
        root = ws.resolve(args.get("path") or ws.workdir, what="path")
        ignore = list(DEFAULT_IGNORE) + list(args.get("ignore") or [])
        entries = [
            (k, rel)
            for k, rel in await ws.tree(root, 6, limit=20_000)
            if not any(fnmatch.fnmatch(part, pat) for part in rel.split("/") for pat in ignore)
        ]
        lines = render_tree(entries)
        more = len(lines) > RESULT_LIMIT
        return ToolOutput(
            text=f"{root.rstrip('/')}/\n"
            + "\n".join("  " + line for line in lines[:RESULT_LIMIT])
            + (f"\n(Truncated: {len(lines)} entries. List a subdirectory to see more.)" if more else "")
        )
