"""SWE-smith (``SWE-bench/SWE-smith``): ~50k synthetic bugs over ~128+ repositories, one image per repo.

A row's ``patch`` *introduces* the bug into the clean repository of the repo image
(``image_name``: ``swesmith.x86_64.<owner>__<repo>.<commit8>``, or ``..._1776_...`` in newer rows,
published under the ``swebench/`` namespace, formerly ``jyangballin/``). ``repo`` is the mirror
``swesmith/<owner>__<repo>.<commit8>``. So the loader keeps the bug patch as ``setup_patch`` (applied
at episode start, see docs/datasets.md) and the gold fix is its reverse. Python repos run pytest on
the files of FAIL_TO_PASS / PASS_TO_PASS; there is no separate test patch.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from swe_rl.tasks.datasets.common import eval_script_around, require_str, test_list
from swe_rl.tasks.datasets.reverse_patch import PatchNotReversible, reverse_patch
from swe_rl.tasks.instance import DEFAULT_WORKDIR
from swe_rl.tasks.rows import RowInvalid

NAME = "swe-smith"
DATA_SOURCE = "SWE-smith"
IMAGE_NAMESPACE = "swebench"
TEST_COMMAND = "pytest --disable-warnings --color=no --tb=no --verbose"


def looks_like(row: Mapping[str, Any]) -> bool:
    return "swesmith" in str(row.get("image_name") or "") or str(row.get("repo") or "").startswith(
        "swesmith/"
    )


def upstream_repo(mirror: str) -> str:
    """``swesmith/pandas-dev__pandas.95280573`` → ``pandas-dev/pandas``."""
    name = mirror.split("/", 1)[1] if mirror.startswith("swesmith/") else mirror
    name = name.rsplit(".", 1)[0] if "." in name else name
    if "__" in name:
        owner, repo = name.split("__", 1)
        return f"{owner}/{repo}"
    return name.replace("_1776_", "/", 1)


def image_with_namespace(image: str) -> str:
    return image if "/" in image else f"{IMAGE_NAMESPACE}/{image}"


def test_files(tests: list[str]) -> list[str]:
    """pytest node ids → their files; empty when a name is not a node id (then the whole suite runs)."""
    files = []
    for test in tests:
        path = test.split("::", 1)[0]
        if "::" not in test or not path.endswith(".py"):
            return []
        files.append(path)
    return list(dict.fromkeys(files))


def convert(row: Mapping[str, Any]) -> dict[str, Any]:
    instance_id = require_str(row, "instance_id")
    mirror = require_str(row, "repo", instance_id)
    image = require_str(row, "image_name", instance_id)
    bug_patch = require_str(row, "patch", instance_id)
    fail_to_pass = test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
    if not fail_to_pass:
        raise RowInvalid("FAIL_TO_PASS is empty: nothing tells a fix from no fix", instance_id)
    pass_to_pass = test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id)
    try:
        gold = reverse_patch(bug_patch)
    except PatchNotReversible as exc:
        raise RowInvalid(f"the bug patch cannot be reversed into a gold fix: {exc}", instance_id) from None
    files = test_files([*fail_to_pass, *pass_to_pass])
    # The image's HEAD is the clean repo: test files a task set-up hid are restored before the run.
    restore = [f"git checkout HEAD -- {' '.join(shlex.quote(f) for f in files)}"] if files else []
    command = f"{TEST_COMMAND} {' '.join(shlex.quote(f) for f in files)}".rstrip()
    out = {k: v for k, v in row.items() if k not in {"patch", "image_name"}}
    out.update(
        repo=upstream_repo(mirror),
        swesmith_repo=mirror,
        patch=gold,
        setup_patch=bug_patch,
        test_patch="",
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=pass_to_pass,
        image_name=image_with_namespace(image),
        image_scheme="per-repo",
        workdir=DEFAULT_WORKDIR,
        eval_script=eval_script_around(DEFAULT_WORKDIR, [command], before_tests=restore),
        language="python",
        log_parser="pytest",
        test_cmds=[command],
        data_source=DATA_SOURCE,
    )
    return out
