"""Unified diffs as data: split a patch into file diffs and hunks, and join them back.

The integrity grader (`swe_rl.grading.integrity`) decides per file and per line what of an
agent's patch may reach the test run, so it needs the patch in pieces that can be
dropped or trimmed and reassembled into a patch `git apply` still takes. Hunk bodies
are consumed by their ``@@`` counts, so a removed line that starts with ``--`` is
never mistaken for a file header. Handles `git diff` output (modes, renames, binary
patches) and plain ``diff -u`` output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["DiffHunk", "FileDiff", "added_lines", "join_patch", "split_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def _ranges(header: str) -> tuple[int, int, int, int] | None:
    m = _HUNK.match(header)
    if not m:
        return None
    return (
        int(m.group(1)),
        int(m.group(2)) if m.group(2) is not None else 1,
        int(m.group(3)),
        int(m.group(4)) if m.group(4) is not None else 1,
    )


@dataclass
class DiffHunk:
    """One ``@@`` block: its line ranges and its body lines (each with its ' ', '+', '-' or '\\' mark)."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    tail: str = ""
    """What follows the second ``@@`` (the function context git prints)."""
    lines: list[str] = field(default_factory=list)
    raw: str | None = None
    """The header as written, kept while the ranges are unchanged (so an untouched patch joins back byte-exact)."""

    def header(self) -> str:
        made = f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@{self.tail}"
        if self.raw is not None and _ranges(self.raw) == (
            self.old_start,
            self.old_len,
            self.new_start,
            self.new_len,
        ):
            return self.raw
        return made

    def text(self) -> str:
        return "\n".join([self.header(), *self.lines])

    def recount(self) -> None:
        """Set the lengths from the body (after lines were removed or turned into context)."""
        self.old_len = sum(1 for x in self.lines if x[:1] in (" ", "-") or x == "")
        self.new_len = sum(1 for x in self.lines if x[:1] in (" ", "+") or x == "")

    @property
    def changes(self) -> bool:
        return any(x[:1] in ("+", "-") for x in self.lines)


@dataclass
class FileDiff:
    """The part of a patch about one file."""

    header: list[str]
    """``diff --git``, mode, index, rename, ``---``/``+++`` lines (binary patches: everything)."""
    hunks: list[DiffHunk] = field(default_factory=list)
    old_path: str | None = None
    """Path before the change (None for a new file)."""
    new_path: str | None = None
    """Path after the change (None for a deleted file)."""

    @property
    def paths(self) -> list[str]:
        """Both sides' paths, without duplicates."""
        return list(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    def text(self) -> str:
        return "\n".join([*self.header, *(h.text() for h in self.hunks)])


def _strip_side(path: str) -> str | None:
    path = path.strip()
    if path.startswith('"') and path.endswith('"'):
        path = (
            path[1:-1]
            .encode("latin-1", "backslashreplace")
            .decode("unicode_escape")
            .encode("latin-1", "replace")
            .decode("utf-8", "replace")
        )
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def _paths_from_header(fd: FileDiff) -> None:
    old = new = None
    seen_minus = seen_plus = False
    for line in fd.header:
        if line.startswith("--- "):
            old, seen_minus = _strip_side(line[4:].split("\t")[0]), True
        elif line.startswith("+++ "):
            new, seen_plus = _strip_side(line[4:].split("\t")[0]), True
        elif line.startswith(("rename from ", "copy from ")):
            old = line.split(" ", 2)[2]
        elif line.startswith(("rename to ", "copy to ")):
            new = line.split(" ", 2)[2]
    first = fd.header[0] if fd.header else ""
    if first.startswith("diff --git ") and not (seen_minus and seen_plus):
        rest = first[len("diff --git ") :]
        m = re.match(r'^("?a/.+?"?) ("?b/.+"?)$', rest)
        a, b = (_strip_side(m.group(1)), _strip_side(m.group(2))) if m else (None, None)
        old, new = old or a, new or b
        if any(x.startswith("new file mode") for x in fd.header):
            old = None
        if any(x.startswith("deleted file mode") for x in fd.header):
            new = None
    fd.old_path, fd.new_path = old, new


def split_patch(patch: str) -> tuple[str, list[FileDiff]]:
    """(text before the first file, file diffs). ``join_patch`` of the result gives the patch back."""
    lines = patch.split("\n")
    trailing_newline = patch.endswith("\n")
    if trailing_newline:
        lines = lines[:-1]
    preamble: list[str] = []
    files: list[FileDiff] = []
    i, n = 0, len(lines)
    current: FileDiff | None = None
    while i < n:
        line = lines[i]
        starts_git = line.startswith("diff --git ")
        starts_plain = (
            line.startswith("--- ")
            and i + 1 < n
            and lines[i + 1].startswith("+++ ")
            and (current is None or current.hunks or any(x.startswith("+++ ") for x in current.header))
        )
        if starts_git or starts_plain:
            current = FileDiff(header=[line])
            files.append(current)
            i += 1
            continue
        m = _HUNK.match(line)
        if current is not None and m:
            old_len = int(m.group(2)) if m.group(2) is not None else 1
            new_len = int(m.group(4)) if m.group(4) is not None else 1
            hunk = DiffHunk(int(m.group(1)), old_len, int(m.group(3)), new_len, m.group(5), raw=line)
            i += 1
            old_left, new_left = old_len, new_len
            while i < n and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                body = lines[i]
                mark = body[:1]
                if mark == "\\":
                    pass
                elif mark == "-":
                    old_left -= 1
                elif mark == "+":
                    new_left -= 1
                elif mark == " " or body == "":
                    old_left, new_left = old_left - 1, new_left - 1
                else:
                    break  # a malformed hunk: stop here, the rest is kept as header text
                hunk.lines.append(body)
                i += 1
            current.hunks.append(hunk)
            continue
        if current is None:
            preamble.append(line)
        elif current.hunks:  # text after a hunk that is no hunk line: keep it with the next hunk's file
            current.hunks[-1].lines.append(line)
        else:
            current.header.append(line)
        i += 1
    for fd in files:
        _paths_from_header(fd)
    text = "\n".join(preamble)
    return (text + "\n" if preamble and (files or trailing_newline) else text), files


def join_patch(preamble: str, files: list[FileDiff]) -> str:
    """The patch text of `files` (empty when there is none)."""
    if not files:
        return ""
    return preamble + "\n".join(fd.text() for fd in files) + "\n"


def added_lines(patch: str, path: str) -> frozenset[int] | None:
    """The line numbers (1-based, in the file after the patch) of the lines `patch` adds to `path`; None
    when the patch does not touch `path`. A new file's lines are all added."""
    for fd in split_patch(patch)[1]:
        if fd.new_path != path:
            continue
        added: set[int] = set()
        for hunk in fd.hunks:
            line = hunk.new_start
            for text in hunk.lines:
                mark = text[:1]
                if mark == "+":
                    added.add(line)
                if mark in ("+", " ") or text == "":
                    line += 1
        return frozenset(added)
    return None
