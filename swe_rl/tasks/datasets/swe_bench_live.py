"""SWE-bench-Live (``SWE-bench-Live/SWE-bench-Live``, ``/MultiLang``): monthly, contamination-resistant.

Rows are SWE-bench rows plus ``test_cmds`` (commands run after the test patch), ``log_parser``
(``pytest`` for the Python set; a parser name for MultiLang) and, for MultiLang, ``rebuild_cmds``
(run after a patch, before the tests) and ``print_cmds`` (print the test log). The image is the
row's ``docker_image`` or ``starryzhang/sweb.eval.x86_64.<id with __ → _1776_>``; repo at ``/testbed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swe_rl.tasks.datasets.common import eval_script_around, require_str, test_list, text_list
from swe_rl.tasks.instance import DEFAULT_WORKDIR
from swe_rl.tasks.rows import RowInvalid

NAME = "swe-bench-live"
DATA_SOURCE = "SWE-bench-Live"


def looks_like(row: Mapping[str, Any]) -> bool:
    return "test_cmds" in row and "instance_id" in row and "install_config" not in row


def default_image(instance_id: str) -> str:
    return "starryzhang/sweb.eval.x86_64." + instance_id.replace("__", "_1776_").lower()


def convert(row: Mapping[str, Any]) -> dict[str, Any]:
    instance_id = require_str(row, "instance_id")
    require_str(row, "repo", instance_id)
    commands = text_list(row.get("test_cmds"), "test_cmds", instance_id)
    if not commands:
        raise RowInvalid("test_cmds is empty: no way to run the tests", instance_id)
    fail_to_pass = test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
    if not fail_to_pass:
        raise RowInvalid("FAIL_TO_PASS is empty: nothing tells a fix from no fix", instance_id)
    rebuild = text_list(row.get("rebuild_cmds"), "rebuild_cmds", instance_id)
    printing = text_list(row.get("print_cmds"), "print_cmds", instance_id)
    out = {k: v for k, v in row.items() if k != "docker_image"}
    out.update(
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id),
        image_name=str(row.get("docker_image") or default_image(instance_id)),
        workdir=DEFAULT_WORKDIR,
        eval_script=eval_script_around(
            DEFAULT_WORKDIR,
            [*commands, *printing],
            test_patch=str(row.get("test_patch") or ""),
            base_commit=str(row.get("base_commit") or ""),
            before_tests=rebuild,
        ),
        language=str(row.get("language") or ("python" if not printing else "")),
        log_parser=str(row.get("log_parser") or "pytest"),
        test_cmds=commands,
        data_source=DATA_SOURCE,
    )
    return out
