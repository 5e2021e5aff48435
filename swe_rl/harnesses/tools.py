"""What tool-calling harnesses share: a repository `Workspace` over an `Environment`, and the file,
search and shell operations their tools are made of.

    ws = await Workspace.of(env)                     # the container's repository (its workdir)
    text = await ws.read_text("src/a.py")            # ToolError: missing, a directory, binary
    new = replace_text(text, old, new, path="src/a.py")   # ToolError: not found / found N times
    await ws.write_text("src/a.py", new)             # only inside the repository; mode kept
    out = await ws.shell("pytest -q", timeout=60)    # an ExecResult, a timeout is a result

Files are read and written through the fleet's file endpoints (bytes, so binary and unicode files
round-trip); listing and searching run ``find`` / ``grep`` in the container. Every failure the
policy can cause is a `ToolError` whose message is shown to it as is. Writes replace the content
of an existing file in place (its mode, owner and links stay), so an edit never shows up as a
mode change in the patch.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import secrets
import shlex
import weakref
from dataclasses import dataclass, field
from typing import Any

from swe_rl.agent.protocols import Environment
from swe_rl.fleet.client import ExecResult
from swe_rl.fleet.errors import BadRequest, CommandRefused, FileNotFound, IsADirectory

__all__ = [
    "DEFAULT_WORKDIR",
    "ToolError",
    "ToolOutput",
    "Workspace",
    "count_lines",
    "glob_to_regex",
    "is_binary",
    "numbered",
    "replace_text",
]

DEFAULT_WORKDIR = "/testbed"
SCRATCH_DIR = "/tmp/.swe-rl-tools"
"""Where writes are staged in the container (outside the repository, so never in the diff)."""
_WORKSPACES: weakref.WeakKeyDictionary[Any, Workspace] = weakref.WeakKeyDictionary()


class ToolError(Exception):
    """A tool call that failed for a reason the policy should read (the message is the observation)."""


@dataclass
class ToolOutput:
    """What one tool call gives back (rendered into the tool message)."""

    text: str
    ok: bool = True
    returncode: int = 0
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0

    def as_result(self) -> ExecResult:
        return ExecResult(
            returncode=self.returncode if self.ok else (self.returncode or 1),
            output=self.text,
            timed_out=self.timed_out,
            truncated=self.truncated,
            output_bytes=len(self.text.encode("utf-8", "replace")),
            duration=self.duration,
        )


def q(value: str) -> str:
    return shlex.quote(value)


def is_binary(data: bytes) -> bool:
    """NUL bytes in the first 8 KiB, or not UTF-8."""
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def count_lines(text: str) -> int:
    return len(text.splitlines())


def numbered(lines: list[str], start: int = 1) -> str:
    """``cat -n`` style: the line number right-aligned in 6 columns, a tab, the line."""
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines, start))


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def replace_text(
    text: str, old: str, new: str, *, path: str, replace_all: bool = False, old_name: str = "old string"
) -> tuple[str, int, int]:
    """``text`` with ``old`` replaced by ``new``; returns (new text, replacements, first line changed).
    ToolError when ``old`` is empty, not found, or found several times without ``replace_all``."""
    if old == "":
        raise ToolError(f"the {old_name} is empty: give the exact text to replace")
    if old == new:
        raise ToolError(f"the {old_name} and its replacement are the same: nothing would change")
    count = text.count(old)
    if count == 0:
        hint = ""
        squeezed = [line.strip() for line in old.splitlines() if line.strip()]
        if squeezed and all(s in text for s in squeezed):
            hint = " (its lines exist with other indentation or line breaks: copy the text exactly, whitespace included)"
        raise ToolError(f"the {old_name} was not found in {path}{hint}; no change was made")
    if count > 1 and not replace_all:
        starts, at = [], text.find(old)
        while at != -1:
            starts.append(_line_of(text, at))
            at = text.find(old, at + 1)
        raise ToolError(
            f"the {old_name} was found {count} times in {path} (lines {', '.join(map(str, starts))}); "
            "no change was made: include more surrounding lines to make it unique"
            + ("" if old_name == "old_str" else ", or set replace_all to replace every occurrence")
        )
    first = _line_of(text, text.find(old))
    return (
        (text.replace(old, new) if replace_all else text.replace(old, new, 1)),
        (count if replace_all else 1),
        first,
    )


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """A glob over relative paths: ``**`` any directories, ``*`` / ``?`` within a name, ``{a,b}`` alternatives;
    a pattern without ``/`` matches names at any depth."""
    if "/" not in pattern and not pattern.startswith("**"):
        pattern = "**/" + pattern
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "{" and "}" in pattern[i:]:
            end = pattern.index("}", i)
            out.append(
                "(?:" + "|".join(fnmatch.translate(p)[4:-3] for p in pattern[i + 1 : end].split(",")) + ")"
            )
            i = end + 1
            continue
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                out.append(pattern[i : end + 1].replace("[!", "[^"))
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


@dataclass
class Workspace:
    """The repository inside one environment; `Workspace.of(env)` keeps one per environment."""

    env: Environment
    workdir: str = DEFAULT_WORKDIR
    history: dict[str, list[bytes | None]] = field(default_factory=dict)
    """Earlier contents of edited files, newest last (None: the file did not exist), for undo."""
    scratch_dir: str = SCRATCH_DIR
    """Where writes are staged; an environment may name its own (``scratch_dir``: the in-process one does)."""

    @classmethod
    async def of(cls, env: Environment) -> Workspace:
        try:
            ws = _WORKSPACES.get(env)
        except TypeError:  # not weak-referenceable: no per-episode state then
            ws = None
        if ws is None:
            scratch = getattr(env, "scratch_dir", None)
            ws = cls(
                env, await _workdir(env), scratch_dir=scratch if isinstance(scratch, str) else SCRATCH_DIR
            )
            try:
                _WORKSPACES[env] = ws
            except TypeError:
                pass
        return ws

    # ------------------------------------------------------------------ paths

    def resolve(self, path: str, *, inside: bool = False, what: str = "path") -> str:
        """Absolute, normalized path (relative ones are taken from the workdir); with ``inside``,
        ToolError unless it is in the repository."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError(f"the {what} is empty")
        path = path.strip()
        full = posixpath.normpath(path if path.startswith("/") else posixpath.join(self.workdir, path))
        if full.startswith("//"):
            full = "/" + full.lstrip("/")
        if inside and not self.contains(full):
            raise ToolError(
                f"{path} is outside the repository {self.workdir}: only files in it can be changed"
            )
        if inside and (
            full == posixpath.join(self.workdir, ".git")
            or full.startswith(posixpath.join(self.workdir, ".git") + "/")
        ):
            raise ToolError(f"{path} is inside .git: change the repository through git commands instead")
        return full

    def contains(self, full: str) -> bool:
        root = self.workdir.rstrip("/") or "/"
        return full == root or full.startswith(root + "/") or root == "/"

    def relative(self, full: str) -> str:
        root = self.workdir.rstrip("/")
        return full[len(root) + 1 :] if full.startswith(root + "/") else full

    # ------------------------------------------------------------------ files

    async def kind(self, full: str) -> str | None:
        """``file``, ``dir``, ``other``, or None when nothing is there."""
        res = await self.shell(
            f"if [ -d {q(full)} ]; then echo dir; elif [ -f {q(full)} ]; then echo file; "
            f"elif [ -e {q(full)} ]; then echo other; else echo none; fi",
            timeout=30,
        )
        word = res.output.strip().splitlines()[-1] if res.output.strip() else "none"
        return None if word == "none" else word

    async def read_bytes(self, full: str, shown: str | None = None) -> bytes:
        shown = shown or full
        try:
            return await self.env.read_file(full)
        except FileNotFound:
            raise ToolError(f"{shown} does not exist") from None
        except IsADirectory:
            raise ToolError(f"{shown} is a directory, not a file") from None
        except BadRequest as exc:
            raise ToolError(f"cannot read {shown}: {str(exc).split(': ', 1)[-1]}") from None

    async def read_text(self, full: str, shown: str | None = None) -> str:
        data = await self.read_bytes(full, shown)
        if is_binary(data):
            raise ToolError(
                f"{shown or full} is a binary file ({len(data)} bytes), not text: it cannot be shown "
                "or edited with this tool"
            )
        return data.decode("utf-8")

    async def write_bytes(
        self, full: str, data: bytes, *, existed: bool, remember: bytes | None = None
    ) -> None:
        """Write a file in the repository: in place when it exists (mode and links kept), else created
        with its directories. ``remember`` (or None for a new file) goes to the undo history."""
        if not self.contains(full):
            raise ToolError(f"{full} is outside the repository {self.workdir}")
        if existed:
            scratch = f"{self.scratch_dir}/{secrets.token_hex(8)}"
            await self.env.write_file(scratch, data)
            res = await self.shell(
                f"cat -- {q(scratch)} > {q(full)}; rc=$?; rm -f -- {q(scratch)}; exit $rc", timeout=60
            )
            if res.returncode != 0:
                raise ToolError(f"cannot write {full}: {res.output.strip()}")
        else:
            try:
                await self.env.write_file(full, data)
            except IsADirectory:
                raise ToolError(f"cannot create {full}: it is a directory") from None
            except BadRequest as exc:
                raise ToolError(f"cannot create {full}: {str(exc).split(': ', 1)[-1]}") from None
        self.history.setdefault(full, []).append(remember if existed else None)

    async def write_text(self, full: str, text: str, *, existed: bool, previous: str | None = None) -> None:
        await self.write_bytes(
            full,
            text.encode("utf-8"),
            existed=existed,
            remember=previous.encode("utf-8") if previous is not None else None,
        )

    async def delete(self, full: str, previous: bytes) -> None:
        res = await self.shell(f"rm -f -- {q(full)}", timeout=30)
        if res.returncode != 0:
            raise ToolError(f"cannot delete {full}: {res.output.strip()}")
        self.history.setdefault(full, []).append(previous)

    async def undo(self, full: str) -> str:
        """Put back the content before the last edit of ``full``; returns what was done."""
        stack = self.history.get(full)
        if not stack:
            raise ToolError(f"no edit of {full} to undo")
        previous = stack.pop()
        if previous is None:
            res = await self.shell(f"rm -f -- {q(full)}", timeout=30)
            if res.returncode != 0:
                raise ToolError(f"cannot undo the creation of {full}: {res.output.strip()}")
            return f"Removed {full} (it was created by the undone edit)."
        existed = await self.kind(full) == "file"
        await self.write_bytes(full, previous, existed=existed)
        self.history[full].pop()  # the undo itself is not an edit to undo
        return f"Last edit to {full} undone."

    # ------------------------------------------------------------------ commands

    async def shell(
        self, command: str, timeout: float | None = 60.0, workdir: str | None = None
    ) -> ExecResult:
        """Run a command (from ``workdir`` when given); a refused command is a result, not an exception."""
        if workdir:
            command = f"cd {q(workdir)} || exit 1\n{command}"
        try:
            return await self.env.exec(command, timeout=timeout)
        except CommandRefused as exc:
            return ExecResult(
                returncode=-1,
                output=f"the command was refused: {exc}",
                timed_out=False,
                truncated=False,
                output_bytes=0,
                duration=0.0,
            )

    async def files(self, root: str, *, limit: int = 100_000) -> list[str]:
        """Files and links under ``root`` (relative to it, sorted), ``.git`` left out."""
        res = await self.shell(
            f"cd {q(root)} && find . -name .git -prune -o \\( -type f -o -type l \\) -print "
            f"| head -n {limit}",
            timeout=120,
        )
        if res.returncode != 0 and not res.output.strip():
            raise ToolError(f"cannot list {root}")
        return sorted(line[2:] for line in res.output.splitlines() if line.startswith("./"))

    async def tree(
        self, root: str, depth: int, *, hidden: bool = True, limit: int = 5000
    ) -> list[tuple[str, str]]:
        """(kind, relative path) of entries under ``root`` down to ``depth`` levels; kind is ``d``, ``f``, ``l``..."""
        kind = await self.kind(root)
        if kind is None:
            raise ToolError(f"{root} does not exist")
        if kind != "dir":
            raise ToolError(f"{root} is not a directory")
        skip = "-name .git -prune -o " + ("" if hidden else "-name '.*' -prune -o ")
        res = await self.shell(
            f"cd {q(root)} && find . -mindepth 1 -maxdepth {int(depth)} {skip}-printf '%y %P\\n' "
            f"| LC_ALL=C sort -k2 | head -n {limit}",
            timeout=120,
        )
        entries = []
        for line in res.output.splitlines():
            if len(line) > 2 and line[1] == " ":
                entries.append((line[0], line[2:]))
        return entries


async def _workdir(env: Environment) -> str:
    for owner in (env, getattr(env, "lease", None)):
        value = getattr(owner, "workdir", None)
        if isinstance(value, str) and value.startswith("/"):
            return value.rstrip("/") or "/"
    try:
        res = await env.exec("pwd", timeout=30)
        line = res.output.strip().splitlines()[-1] if res.output.strip() else ""
        if res.returncode == 0 and line.startswith("/"):
            return line
    except CommandRefused:
        pass
    return DEFAULT_WORKDIR


# --------------------------------------------------------------------------- search and listing


async def grep(
    ws: Workspace,
    pattern: str,
    root: str,
    *,
    include: str | None = None,
    files_only: bool = False,
    limit: int = 100,
) -> tuple[list[str], bool]:
    """``grep -E`` over the text files under ``root`` (``.git`` left out): matching files, or
    ``path:line:text`` lines; returns (at most ``limit`` results, whether there were more)."""
    if not pattern:
        raise ToolError("the pattern is empty")
    kind = await ws.kind(root)
    if kind is None:
        raise ToolError(f"{root} does not exist")
    flags = "-rlIE" if files_only else "-rnIE"
    inc = f" --include={q(include)}" if include else ""
    res = await ws.shell(
        f"grep {flags} --exclude-dir=.git{inc} -e {q(pattern)} -- {q(root)} 2>&1 "
        f"| head -n {limit + 1}; exit ${{PIPESTATUS[0]}}",
        timeout=120,
    )
    if res.returncode not in (0, 1) or res.output.startswith("grep: "):
        msg = res.output.strip().splitlines()[0] if res.output.strip() else f"exit code {res.returncode}"
        raise ToolError(f"the search failed (is the pattern a valid extended regular expression?): {msg}")
    lines = [line for line in res.output.splitlines() if line]
    return lines[:limit], len(lines) > limit


def render_tree(entries: list[tuple[str, str]]) -> list[str]:
    """Indented names (two spaces per level; directories end with ``/``, links with ``@``), parents first."""
    out = []
    for kind, rel in sorted(entries, key=lambda e: e[1].split("/")):
        depth = rel.count("/")
        out.append(
            "  " * depth + rel.rsplit("/", 1)[-1] + ("/" if kind == "d" else "@" if kind == "l" else "")
        )
    return out
