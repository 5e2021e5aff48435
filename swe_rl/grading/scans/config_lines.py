"""Line rules of ``setup.cfg`` and ``pyproject.toml``: the pytest lines an agent's diff may not touch.

These files hold the project's own settings next to the test runner's, so `integrity.neutralise`
cannot drop them whole: it removes, hunk by hunk, the lines inside pytest sections (``[pytest]``,
``[tool:pytest]``, ``[tool.pytest.*]``, pytest entry points) and any line mentioning ``pytest``. A
removed line becomes context again and the hunk is recounted. The section a line is in is read from
the file at the base commit; a file whose original is unknown counts every line as a test line.
"""

from __future__ import annotations

import re

from swe_rl.grading.patch.split import DiffHunk, FileDiff

__all__ = ["trim_sectioned"]

_SECTION = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:[#;].*)?$")


def _test_section(name: str | None) -> bool:
    if name is None:
        return True  # unknown: treat as a test section (conservative)
    return (
        "pytest" in name.lower()
    )  # [pytest], [tool:pytest], [tool.pytest.*], [project.entry-points.pytest11]


def _section_at(original: list[str] | None, line_no: int) -> str | None:
    """The section in effect after the first `line_no` lines of the original file ('' before any header)."""
    if original is None:
        return None
    current = ""
    for text in original[: max(0, line_no)]:
        m = _SECTION.match(text)
        if m:
            current = m.group(1)
    return current


def trim_sectioned(fd: FileDiff, original: str | None, known: bool) -> list[str]:
    """Remove test-config lines from a setup.cfg / pyproject.toml diff in place; returns removed hunks' texts."""
    orig_lines: list[str] | None = None  # unknown base content: every line counts as a test line
    if fd.is_new or original is not None or known:
        orig_lines = original.split("\n") if original is not None and not fd.is_new else []
    trimmed: list[str] = []
    kept_hunks: list[DiffHunk] = []
    shift = 0  # new-side offset of later hunks after lines were removed
    for hunk in fd.hunks:
        before = hunk.text()
        old_sec = new_sec = _section_at(orig_lines, hunk.old_start - 1 if hunk.old_len else hunk.old_start)
        out: list[str] = []
        touched = dropped_last = False
        for line in hunk.lines:
            mark, body = line[:1], line[1:]
            m = _SECTION.match(body)
            if mark == "\\":  # "\ No newline at end of file" goes with the line before it
                if not dropped_last:
                    out.append(line)
                continue
            dropped_last = False
            if mark == " " or line == "":
                if m:
                    old_sec = new_sec = m.group(1)
                out.append(line)
            elif mark == "-":
                if m:
                    old_sec = m.group(1)
                if _test_section(old_sec) or "pytest" in body.lower():
                    out.append(" " + body)  # keep the original line
                    if m:
                        new_sec = old_sec
                    touched = True
                else:
                    out.append(line)
            else:  # "+"
                sec = m.group(1) if m else new_sec
                new_sec = sec
                if _test_section(sec) or "pytest" in body.lower():
                    touched = dropped_last = (
                        True  # drop the added line (a header too: its keys follow it out)
                    )
                    continue
                out.append(line)
        if touched:
            trimmed.append(before)
            hunk.lines = out
            new_len_before = hunk.new_len
            hunk.recount()
            hunk.new_start += shift
            shift += hunk.new_len - new_len_before
            if hunk.changes:
                kept_hunks.append(hunk)
            continue
        hunk.new_start += shift
        kept_hunks.append(hunk)
    fd.hunks = kept_hunks
    return trimmed
