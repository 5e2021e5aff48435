"""Reverse a unified git diff as text (what ``git apply -R`` would apply), for SWE-smith rows.

SWE-smith ships the patch that *introduces* the bug; the fix a gold run applies is its reverse.
Hunk headers swap their old/new ranges, ``+``/``-`` lines swap, ``---``/``+++`` swap, and file
creations, deletions, renames and mode changes swap sides. Binary patches are refused.
"""

from __future__ import annotations

import re

__all__ = ["PatchNotReversible", "reverse_patch"]

_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
_SWAPS = (
    ("new file mode ", "deleted file mode "),
    ("rename from ", "rename to "),
    ("copy from ", "copy to "),
    ("old mode ", "new mode "),
)


class PatchNotReversible(ValueError):
    """The patch has something this text reversal does not handle (binary content)."""


def _swap_prefix(line: str) -> str:
    for a, b in _SWAPS:
        if line.startswith(a):
            return b + line[len(a) :]
        if line.startswith(b):
            return a + line[len(b) :]
    return line


def _reverse_file(block: list[str]) -> list[str]:
    out: list[str] = []
    header: list[str] = []
    i = 0
    while i < len(block) and not block[i].startswith("@@"):
        line = block[i]
        if line.startswith("GIT binary patch") or line.startswith("Binary files"):
            raise PatchNotReversible("binary patches cannot be reversed as text")
        if line.startswith("diff --git "):
            parts = line[len("diff --git ") :].split(" b/", 1)
            if len(parts) == 2 and parts[0].startswith("a/"):
                line = f"diff --git a/{parts[1]} b/{parts[0][2:]}"
        elif line.startswith("index "):
            ids, _, mode = line[len("index ") :].partition(" ")
            old, _, new = ids.partition("..")
            line = f"index {new}..{old}" + (f" {mode}" if mode else "")
        else:
            line = _swap_prefix(line)
        header.append(line)
        i += 1
    minus = next((k for k, h in enumerate(header) if h.startswith("--- ")), None)
    plus = next((k for k, h in enumerate(header) if h.startswith("+++ ")), None)
    if minus is not None and plus is not None:
        old_path, new_path = header[minus][4:], header[plus][4:]
        new_old = "a/" + new_path[2:] if new_path.startswith("b/") else new_path
        new_new = "b/" + old_path[2:] if old_path.startswith("a/") else old_path
        header[minus], header[plus] = "--- " + new_old, "+++ " + new_new
    out.extend(header)
    for line in block[i:]:
        match = _HUNK.match(line)
        if match:
            line = f"@@ -{match.group(2)} +{match.group(1)} @@{match.group(3)}"
        elif line.startswith("-"):
            line = "+" + line[1:]
        elif line.startswith("+"):
            line = "-" + line[1:]
        out.append(line)
    return out


def reverse_patch(patch: str) -> str:
    """The reverse of a unified git diff; raises `PatchNotReversible` for binary content."""
    lines = patch.split("\n")
    trailing = lines[-1] == ""
    if trailing:
        lines = lines[:-1]
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith("diff --git ") or not blocks:
            blocks.append([])
        blocks[-1].append(line)
    out = [line for block in blocks for line in _reverse_file(block)]
    return "\n".join(out) + ("\n" if trailing else "")
