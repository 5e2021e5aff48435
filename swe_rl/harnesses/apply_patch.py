"""Codex's patch format: parse it, and apply it to files read and written through a `Workspace`.

    *** Begin Patch
    *** Add File: docs/new.md
    +first line
    *** Update File: src/app.py
    *** Move to: src/main.py            (optional rename)
    @@ def handler(request):            (optional: a line to find first, narrowing the search)
     context line
    -removed line
    +added line
    *** End of File                     (optional: the hunk ends at the end of the file)
    *** Delete File: old/unused.py
    *** End Patch

    ops = parse_patch(text)                        # PatchError with the line number on bad syntax
    summary = await apply_patch(ws, text)          # all or nothing: every file is computed before any write

Hunks are located in order, each after the previous one; lines are compared exactly, then
ignoring trailing whitespace, then ignoring surrounding whitespace. A hunk that cannot be found
is an error naming the file and showing the lines that were expected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from swe_rl.harnesses.tools import ToolError, Workspace

__all__ = ["FileOp", "Hunk", "PatchError", "apply_hunks", "apply_patch", "parse_patch", "patch_from_diff"]

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, DELETE, UPDATE, MOVE = "*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "
EOF_MARK = "*** End of File"


class PatchError(ToolError):
    """The patch is malformed or does not fit the files."""


@dataclass
class Hunk:
    """One ``@@`` section: the lines before and after, and an optional anchor line to find first."""

    anchor: str | None = None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    at_eof: bool = False
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(tag, text) in order: ' ' context, '-' removed, '+' added."""


@dataclass
class FileOp:
    kind: str
    """``add``, ``delete`` or ``update``."""
    path: str
    move_to: str | None = None
    content: list[str] = field(default_factory=list)
    """Lines of an added file."""
    hunks: list[Hunk] = field(default_factory=list)


def parse_patch(text: str) -> list[FileOp]:
    """The file operations of a patch; PatchError (with the line) when it is not in the format."""
    lines = text.strip("\n").replace("\r\n", "\n").split("\n")
    # tolerate a heredoc wrapper (apply_patch <<'EOF' ... EOF) around the patch
    while lines and lines[0].strip() != BEGIN and not lines[0].strip().startswith("*** "):
        lines.pop(0)
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"the patch must start with the line '{BEGIN}'")
    end = next((i for i in range(len(lines) - 1, 0, -1) if lines[i].strip() == END), None)
    if end is None:
        raise PatchError(f"the patch must end with the line '{END}'")
    ops: list[FileOp] = []
    i = 1
    while i < end:
        line = lines[i]
        if line.startswith(ADD):
            op = FileOp("add", line[len(ADD) :].strip())
            i += 1
            while i < end and not lines[i].startswith("*** "):
                if not lines[i].startswith("+"):
                    raise PatchError(
                        f"patch line {i + 1}: every line of an added file starts with '+': {lines[i]!r}"
                    )
                op.content.append(lines[i][1:])
                i += 1
            ops.append(op)
        elif line.startswith(DELETE):
            ops.append(FileOp("delete", line[len(DELETE) :].strip()))
            i += 1
        elif line.startswith(UPDATE):
            op = FileOp("update", line[len(UPDATE) :].strip())
            i += 1
            if i < end and lines[i].startswith(MOVE):
                op.move_to = lines[i][len(MOVE) :].strip()
                i += 1
            hunk: Hunk | None = None
            while i < end and (not lines[i].startswith("*** ") or lines[i].strip() == EOF_MARK):
                cur = lines[i]
                if cur.strip() == EOF_MARK:
                    if hunk is None:
                        raise PatchError(f"patch line {i + 1}: '{EOF_MARK}' outside a hunk")
                    hunk.at_eof = True
                elif cur.startswith("@@"):
                    hunk = Hunk(anchor=cur[2:].strip() or None)
                    op.hunks.append(hunk)
                else:
                    if hunk is None:  # the first hunk may omit its @@ line
                        hunk = Hunk()
                        op.hunks.append(hunk)
                    tag, body = (cur[:1], cur[1:]) if cur else (" ", "")
                    if tag in (" ", "-", "+"):
                        hunk.lines.append((tag, body))
                    if tag == " ":
                        hunk.old.append(body)
                        hunk.new.append(body)
                    elif tag == "-":
                        hunk.old.append(body)
                    elif tag == "+":
                        hunk.new.append(body)
                    else:
                        raise PatchError(
                            f"patch line {i + 1}: a hunk line starts with ' ', '-' or '+': {cur!r}"
                        )
                i += 1
            if not op.hunks and op.move_to is None:
                raise PatchError(f"'{UPDATE}{op.path}' has no hunks")
            for n, h in enumerate(op.hunks, 1):
                if not h.old and not h.new:
                    raise PatchError(f"hunk {n} of {op.path} is empty")
            ops.append(op)
        elif not line.strip():
            i += 1
        else:
            raise PatchError(f"patch line {i + 1}: expected '{ADD}', '{DELETE}' or '{UPDATE}', got {line!r}")
    if not ops:
        raise PatchError("the patch changes no file")
    return ops


_NORMALIZERS: list[Callable[[str], str]] = [lambda s: s, str.rstrip, str.strip]


def _find(lines: list[str], needle: list[str], start: int, at_eof: bool) -> int:
    if not needle:
        return len(lines) if at_eof else start
    for norm in _NORMALIZERS:
        want = [norm(x) for x in needle]
        if at_eof:
            pos = len(lines) - len(needle)
            if pos >= start and [norm(x) for x in lines[pos:]] == want:
                return pos
        for pos in range(start, len(lines) - len(needle) + 1):
            if [norm(x) for x in lines[pos : pos + len(needle)]] == want:
                return pos
    return -1


def apply_hunks(text: str, hunks: list[Hunk], path: str) -> str:
    """The new content of a file after its hunks; PatchError when one does not fit."""
    trailing_newline = text.endswith("\n") or text == ""
    lines = text.split("\n")
    if trailing_newline:
        lines.pop()
    cursor = 0
    for n, hunk in enumerate(hunks, 1):
        if hunk.anchor is not None:
            found = next((k for k in range(cursor, len(lines)) if lines[k] == hunk.anchor), None)
            if found is None:
                found = next(
                    (k for k in range(cursor, len(lines)) if lines[k].strip() == hunk.anchor.strip()), None
                )
            if found is None:
                raise PatchError(f"hunk {n} of {path}: its @@ line {hunk.anchor!r} was not found in the file")
            cursor = found + 1
        pos = _find(lines, hunk.old, cursor, hunk.at_eof)
        if pos < 0:
            shown = "\n".join(hunk.old)
            raise PatchError(
                f"hunk {n} of {path}: the expected lines were not found"
                f"{' after line ' + str(cursor) if cursor else ''}:\n{shown}"
            )
        original, k, replacement = lines[pos : pos + len(hunk.old)], 0, []
        for tag, body in hunk.lines:  # context lines keep the file's own text (whitespace included)
            if tag == " ":
                replacement.append(original[k])
                k += 1
            elif tag == "-":
                k += 1
            else:
                replacement.append(body)
        lines[pos : pos + len(hunk.old)] = replacement
        cursor = pos + len(replacement)
    out = "\n".join(lines)
    return out + "\n" if trailing_newline and lines else out


async def apply_patch(ws: Workspace, text: str) -> str:
    """Apply a Codex patch in the repository: every file is read and changed in memory first, then
    written; returns a summary (``A path`` / ``M path`` / ``D path``)."""
    ops = parse_patch(text)
    writes: list[tuple[str, str, str | None, bool]] = []  # (path, new text, previous text, existed)
    deletes: list[tuple[str, bytes]] = []
    summary = []
    for op in ops:
        full = ws.resolve(op.path, inside=True)
        if op.kind == "add":
            if await ws.kind(full) is not None:
                raise PatchError(f"cannot add {op.path}: it already exists (update it instead)")
            writes.append((full, "\n".join(op.content) + "\n" if op.content else "", None, False))
            summary.append(f"A {op.path}")
        elif op.kind == "delete":
            deletes.append((full, await ws.read_bytes(full, op.path)))
            summary.append(f"D {op.path}")
        else:
            old = await ws.read_text(full, op.path)
            new = apply_hunks(old, op.hunks, op.path)
            if op.move_to:
                dest = ws.resolve(op.move_to, inside=True)
                if await ws.kind(dest) is not None:
                    raise PatchError(f"cannot move {op.path} to {op.move_to}: it already exists")
                writes.append((dest, new, None, False))
                deletes.append((full, old.encode("utf-8")))
                summary.append(f"M {op.move_to} (moved from {op.path})")
            else:
                writes.append((full, new, old, True))
                summary.append(f"M {op.path}")
    for full, new, previous, existed in writes:
        await ws.write_text(full, new, existed=existed, previous=previous)
    for full, previous_bytes in deletes:
        await ws.delete(full, previous_bytes)
    return "\n".join(summary)


def patch_from_diff(diff: str) -> str | None:
    """A unified diff (``git diff``) in Codex's format, or None when it has what the format cannot say
    (binary changes, renames with edits, mode changes). Used by the gold policy under the Codex harness."""
    out = [BEGIN]
    files = diff.split("\ndiff --git ")
    for n, chunk in enumerate(files):
        if n == 0 and not chunk.startswith("diff --git "):
            if chunk.strip():
                return None
            continue
        body = chunk.split("\n")
        while body and body[-1] == "":
            body.pop()  # the diff's final newline
        old_path = new_path = None
        i = 1
        while i < len(body) and not body[i].startswith("@@"):
            line = body[i]
            if line.startswith("--- "):
                old_path = None if line[4:].strip() == "/dev/null" else line[4:].strip()[2:]
            elif line.startswith("+++ "):
                new_path = None if line[4:].strip() == "/dev/null" else line[4:].strip()[2:]
            elif line.startswith(
                ("Binary files", "GIT binary patch", "old mode", "new mode", "rename ", "similarity")
            ):
                return None
            i += 1
        if old_path is None and new_path is None:
            return None
        hunks: list[list[str]] = []
        for line in body[i:]:
            if line.startswith("@@"):
                hunks.append([])
            elif line.startswith("\\"):
                continue  # "\ No newline at end of file"
            elif hunks and line[:1] in (" ", "-", "+"):
                hunks[-1].append(line)
            elif hunks and line == "":
                hunks[-1].append(" ")
        if old_path is None:
            out.append(f"{ADD}{new_path}")
            out += [line for h in hunks for line in h if line.startswith("+")]
        elif new_path is None:
            out.append(f"{DELETE}{old_path}")
        else:
            out.append(f"{UPDATE}{old_path}")
            for h in hunks:
                out.append("@@")
                out += h
    out.append(END)
    return "\n".join(out) + "\n"
