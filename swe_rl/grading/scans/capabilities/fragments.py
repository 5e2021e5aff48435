"""The capability scan on pieces of Python that are not a whole module: diff hunks, edits, snippets.

A piece of code cut out of a file (a hunk, the new text of an editor call, a ``sed`` replacement)
rarely parses as it is: it starts inside a block, ends in the middle of a call. It is read as the
largest windows of lines that parse, tried from each line (dedented; a header line ending in ``:``
is closed with ``pass``); lines no window parses are skipped. The pieces lack the rest of their file
(its imports), so names that spell a standard module are read as that module (see
swe_rl/grading/scans/capabilities/names.py). Used by the behaviour monitor on what the agent writes and by
``bench/capability_false_positives.py`` where a repository's files cannot be read
(``scan_fragment`` in swe_rl/grading/scans/capabilities/scan.py), and by the scan on a file that never parsed.
"""

from __future__ import annotations

import ast
import textwrap
from collections import Counter

__all__ = ["parseable_fragment"]

_WINDOW = 60  # lines tried at most from one line


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def parseable_fragment(lines: list[str], coverage: Counter[str] | None = None) -> str:
    """The parts of `lines` that parse as Python, as one module; `coverage` counts the non-blank
    lines seen (``lines``) and parsed (``parsed``)."""
    whole = textwrap.dedent("\n".join(lines))
    if _parses(whole):  # the common case: one parse
        if coverage is not None:
            count = sum(1 for line in lines if line.strip())
            coverage.update({"lines": count, "parsed": count})
        return whole + "\n"
    pieces, i = [], 0
    while i < len(lines):
        for j in range(min(len(lines), i + _WINDOW), i, -1):
            text = textwrap.dedent("\n".join(lines[i:j]))
            if text.rstrip().endswith(":"):
                text += "\n" + " " * 8 + "pass"
            if _parses(text):
                pieces.append(text)
                if coverage is not None:
                    coverage["parsed"] += sum(1 for line in lines[i:j] if line.strip())
                i = j
                break
        else:
            i += 1
    if coverage is not None:
        coverage["lines"] += sum(1 for line in lines if line.strip())
    return "\n".join(pieces) + "\n"
