"""SWE-rebench V2 (``nebius/SWE-rebench-V2``): ~32k tasks, 20 languages, one image per task.

A row carries its own image (``image_name``, e.g. ``docker.io/swerebenchv2/unidata-netcdf-c:1925-ad6bff3``),
``language`` and ``install_config`` with the test command(s) (``test_cmd``, a string or a list) and
the name of the log parser its harness uses (``log_parser``, e.g. ``parse_log_jq``). The repository
is checked out at ``/<repo name>`` (the image's WORKDIR), not ``/testbed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swe_rl.tasks.datasets.common import eval_script_around, require_str, test_list, text_list
from swe_rl.tasks.rows import RowInvalid

NAME = "swe-rebench-v2"
DATA_SOURCE = "SWE-rebench-V2"


def looks_like(row: Mapping[str, Any]) -> bool:
    return "install_config" in row and "image_name" in row and "language" in row


def convert(row: Mapping[str, Any]) -> dict[str, Any]:
    instance_id = require_str(row, "instance_id")
    repo = require_str(row, "repo", instance_id)
    image = require_str(row, "image_name", instance_id)
    config = row.get("install_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            raise RowInvalid("install_config is a string but not valid JSON", instance_id) from None
    if not isinstance(config, Mapping):
        raise RowInvalid("install_config must be an object with test_cmd and log_parser", instance_id)
    commands = text_list(config.get("test_cmd"), "install_config.test_cmd", instance_id)
    if not commands:
        raise RowInvalid("install_config.test_cmd is empty: no way to run the tests", instance_id)
    parser = config.get("log_parser")
    if not isinstance(parser, str) or not parser:
        raise RowInvalid("install_config.log_parser is missing: the test log cannot be parsed", instance_id)
    fail_to_pass = test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
    if not fail_to_pass:
        raise RowInvalid("FAIL_TO_PASS is empty: nothing tells a fix from no fix", instance_id)
    workdir = "/" + repo.rsplit("/", 1)[-1]
    base_commit = str(row.get("base_commit") or "")
    test_patch = str(row.get("test_patch") or "")
    out = {k: v for k, v in row.items() if k not in {"install_config", "image_name"}}
    out.update(
        instance_id=instance_id,
        repo=repo,
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id),
        image_name=image,
        workdir=workdir,
        eval_script=eval_script_around(workdir, commands, test_patch=test_patch, base_commit=base_commit),
        language=str(row.get("language") or ""),
        log_parser=parser,
        test_cmds=commands,
        install_config=dict(config),
        data_source=DATA_SOURCE,
    )
    return out
