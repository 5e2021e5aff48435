"""SWE-bench Multilingual (``SWE-bench/SWE-bench_Multilingual``): 300 tasks, 42 repos, 9 languages.

Rows of swebench 5.x's schema carry their ``eval_script``, ``log_parser`` and ``eval_type``, and are
taken as they are. Older rows need swebench 4.x, which knows every repo of the set: it gives the
eval script (built later by `swe_rl.tasks.eval_script_for`), the language (``MAP_REPO_TO_EXT``) and
the log parser (``MAP_REPO_TO_PARSER``) recorded here. Images are
SWE-bench's ``swebench/sweb.eval.x86_64.<id with __ → _1776_>:latest``. A repo unknown to swebench
is rejected: its tests could not be run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swe_rl.tasks.datasets.common import require_str, test_list
from swe_rl.tasks.rows import RowInvalid

NAME = "swe-bench-multilingual"
DATA_SOURCE = "SWE-bench-Multilingual"

_EXT_LANGUAGE = {"go": "go", "rs": "rust", "js": "javascript", "ts": "typescript", "java": "java",
                 "php": "php", "rb": "ruby", "c": "c", "cpp": "c++", "py": "python"}  # fmt: skip


def looks_like(row: Mapping[str, Any]) -> bool:
    return False  # the SWE-bench schema: only chosen by name (--format swe-bench-multilingual)


def _swebench_maps() -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    try:
        from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    except ImportError as exc:
        raise RowInvalid(
            f"this row has no eval_script/log_parser (swebench 5.x's fields) and swebench 4.x, which "
            f"knows the set's repos, is not importable ({exc}): convert the rows with swe-convert-rows"
        ) from None
    return MAP_REPO_VERSION_TO_SPECS, MAP_REPO_TO_EXT, MAP_REPO_TO_PARSER


def convert(row: Mapping[str, Any]) -> dict[str, Any]:
    instance_id = require_str(row, "instance_id")
    repo = require_str(row, "repo", instance_id)
    version = row.get("version")
    if row.get("eval_script") and str(row.get("log_parser") or "").startswith("parse_log_"):
        return _as_5x_row(row, instance_id)
    specs, exts, parsers = _swebench_maps()
    if repo not in specs:
        raise RowInvalid(f"repo {repo!r} is unknown to swebench: its tests cannot be run", instance_id)
    if str(version) not in specs[repo]:
        raise RowInvalid(f"swebench has no specs for {repo} version {version!r}", instance_id)
    fail_to_pass = test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
    if not fail_to_pass:
        raise RowInvalid("FAIL_TO_PASS is empty: nothing tells a fix from no fix", instance_id)
    parser = parsers.get(repo)
    out = dict(row)
    out.update(
        version=str(version),
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id),
        language=_EXT_LANGUAGE.get(str(exts.get(repo, "")), str(exts.get(repo, ""))),
        log_parser=getattr(parser, "__name__", "") if parser else "",
        data_source=DATA_SOURCE,
    )
    return out


def _as_5x_row(row: Mapping[str, Any], instance_id: str) -> dict[str, Any]:
    """A row that already has swebench 5.x's fields: its test lists checked, nothing looked up."""
    fail_to_pass = test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
    if not fail_to_pass:
        raise RowInvalid("FAIL_TO_PASS is empty: nothing tells a fix from no fix", instance_id)
    out = dict(row)
    out.update(
        version=str(row.get("version") or ""), FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id), data_source=DATA_SOURCE,
    )  # fmt: skip
    return out
