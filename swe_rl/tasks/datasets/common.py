"""Shared pieces of the data-set loaders: the converted row, reasons for rejecting a row, eval scripts.

A loader turns one upstream row into a *flat SWE-bench-style row* (``instance_id``, ``repo``,
``FAIL_TO_PASS``, ``image_name``, ``eval_script``, ``workdir`` ... plus ``language``,
``log_parser``, ``test_cmds`` and the row's other fields), which `swe_rl.tasks.instance_from_row`
then reads like any other row. A row it cannot convert raises `RowInvalid` with the reason.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT
from swe_rl.tasks.rows import RowInvalid

__all__ = [
    "apply_test_patch_lines",
    "eval_script_around",
    "patched_files",
    "require_str",
    "test_list",
    "text_list",
]

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


def require_str(row: Mapping[str, Any], key: str, instance_id: str | None = None) -> str:
    """A non-empty string field, or `RowInvalid` naming it."""
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"
        raise RowInvalid(f"field '{key}' must be a non-empty string ({got})", instance_id)
    return value


def test_list(value: Any, key: str, instance_id: str | None = None) -> list[str]:
    """A list of test names from a list, a JSON-encoded list, or a mapping's keys."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise RowInvalid(f"field '{key}' is a string but not a JSON list", instance_id) from None
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if isinstance(value, Mapping):
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise RowInvalid(f"field '{key}' must be a list of test names", instance_id)
    return value


def text_list(value: Any, key: str, instance_id: str | None = None) -> list[str]:
    """Shell commands given as one string or a list of strings (empty entries dropped)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise RowInvalid(f"field '{key}' must be a command string or a list of them", instance_id)
    return [c for c in value if c.strip()]


def patched_files(patch: str) -> list[str]:
    """Paths a git diff touches (the ``a/`` side), in order, without duplicates."""
    return list(dict.fromkeys(m.group(1) for m in _DIFF_HEADER.finditer(patch or "")))


def _heredoc_tag(text: str) -> str:
    tag = "SWE_RL_TEST_PATCH"
    while tag in text:
        tag += "_X"
    return tag


def apply_test_patch_lines(test_patch: str, base_commit: str) -> list[str]:
    """Reset the files the test patch touches to the base commit, then apply it (as SWE-bench does)."""
    if not test_patch.strip():
        return []
    lines = []
    files = patched_files(test_patch)
    if base_commit and files:
        lines.append(f"git checkout {shlex.quote(base_commit)} -- {' '.join(shlex.quote(f) for f in files)}")
    tag = _heredoc_tag(test_patch)
    body = test_patch if test_patch.endswith("\n") else test_patch + "\n"
    lines.append(f"git apply --verbose --reject - <<'{tag}'\n{body}{tag}")
    return lines


def eval_script_around(
    workdir: str,
    test_commands: Iterable[str],
    *,
    test_patch: str = "",
    base_commit: str = "",
    before_tests: Iterable[str] = (),
) -> str:
    """A bash eval script: apply the test patch, run ``before_tests`` then the test commands between
    SWE-bench's start/end markers (the grader slices the log on them)."""
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        f"cd {shlex.quote(workdir)}",
        *apply_test_patch_lines(test_patch, base_commit),
        *before_tests,
        f": '{START_TEST_OUTPUT}'",
        *test_commands,
        f": '{END_TEST_OUTPUT}'",
    ]
    return "\n".join(lines) + "\n"
