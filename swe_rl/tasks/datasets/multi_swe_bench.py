"""Multi-SWE-bench / Multi-SWE-RL (``ByteDance-Seed/Multi-SWE-bench``, ``.../Multi-SWE-RL``): 7+ languages.

Its own row format: ``org``, ``repo``, ``number``, ``base.sha``, ``resolved_issues`` (the issue text),
``fix_patch`` (gold), ``test_patch``, and test maps keyed by test name: ``f2p_tests``, ``s2p_tests``
(skipped → pass) and ``n2p_tests`` (absent → pass) must pass after the fix, ``p2p_tests`` must keep
passing. Images are ``mswebench/<org>_m_<repo>:pr-<number>`` with the repo at ``/home/<repo>`` and
the harness scripts ``/home/run.sh`` (tests only), ``test-run.sh``, ``fix-run.sh``. Log parsing is
per repository in the upstream harness, so the parser recorded is ``multi-swe-bench:<org>/<repo>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swe_rl.tasks.datasets.common import eval_script_around, require_str, test_list
from swe_rl.tasks.rows import RowInvalid

NAME = "multi-swe-bench"
DATA_SOURCE = "Multi-SWE-bench"


def looks_like(row: Mapping[str, Any]) -> bool:
    return "fix_patch" in row and "org" in row


def _problem_statement(row: Mapping[str, Any]) -> str:
    parts = []
    for issue in row.get("resolved_issues") or []:
        if isinstance(issue, Mapping):
            text = f"{issue.get('title') or ''}\n{issue.get('body') or ''}".strip()
            if text:
                parts.append(text)
    if not parts:  # no linked issue: the pull request's own text
        parts.append(f"{row.get('title') or ''}\n{row.get('body') or ''}".strip())
    return "\n\n".join(p for p in parts if p)


def convert(row: Mapping[str, Any]) -> dict[str, Any]:
    org = require_str(row, "org", row.get("instance_id"))
    name = require_str(row, "repo", row.get("instance_id"))
    number = row.get("number")
    if not isinstance(number, int) and not (isinstance(number, str) and number.isdigit()):
        raise RowInvalid("field 'number' (the pull request) must be an integer", row.get("instance_id"))
    instance_id = str(row.get("instance_id") or f"{org}__{name}-{number}")
    base = row.get("base")
    sha = base.get("sha") if isinstance(base, Mapping) else None
    if not isinstance(sha, str) or not sha:
        raise RowInvalid("field 'base.sha' (the base commit) is missing", instance_id)
    must_pass: list[str] = []
    for key in ("f2p_tests", "s2p_tests", "n2p_tests"):
        must_pass.extend(test_list(row.get(key), key, instance_id))
    if not must_pass:
        raise RowInvalid("f2p_tests, s2p_tests and n2p_tests are all empty: nothing tells a fix", instance_id)
    problem = _problem_statement(row)
    if not problem:
        raise RowInvalid("no issue text: resolved_issues and the PR title/body are empty", instance_id)
    workdir = f"/home/{name}"
    test_patch = str(row.get("test_patch") or "")
    out = {k: v for k, v in row.items() if k not in {"repo", "fix_patch", "base"}}
    out.update(
        instance_id=instance_id,
        repo=f"{org}/{name}",
        base_commit=sha,
        base_ref=base.get("ref") if isinstance(base, Mapping) else None,
        problem_statement=problem,
        patch=str(row.get("fix_patch") or ""),
        test_patch=test_patch,
        FAIL_TO_PASS=list(dict.fromkeys(must_pass)),
        PASS_TO_PASS=test_list(row.get("p2p_tests"), "p2p_tests", instance_id),
        image_name=f"mswebench/{org}_m_{name}:pr-{number}".lower(),
        workdir=workdir,
        eval_script=eval_script_around(
            workdir, ["bash /home/run.sh"], test_patch=test_patch, base_commit=sha
        ),
        language=str(row.get("language") or row.get("lang") or ""),
        log_parser=f"multi-swe-bench:{org}/{name}",
        test_cmds=["bash /home/run.sh"],
        data_source=DATA_SOURCE,
    )
    return out
