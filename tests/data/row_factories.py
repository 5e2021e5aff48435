"""Small hand-made rows in the shapes of SWE-bench, SWE-Gym and R2E-Gym, and CLI helpers."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"  # the old script paths (thin wrappers of swe_rl.data) and the fixtures
FIXTURE_INSTANCES = DATA / "fixtures" / "instances.jsonl"

TEST_PATCH = (
    "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n"
    "@@ -1,1 +1,2 @@\n import x\n+import pytest\n"
)


def swebench_row(instance_id: str = "psf__requests-2317", **over) -> dict:
    """As SWE-bench stores it: test lists JSON-encoded, no image name."""
    row = {
        "repo": "psf/requests",
        "instance_id": instance_id,
        "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "patch": "diff --git a/requests/sessions.py b/requests/sessions.py\n",
        "test_patch": TEST_PATCH,
        "problem_statement": f"Issue of {instance_id}: method = builtin_str(method) breaks",
        "hints_text": "see #2316",
        "created_at": "2014-11-01T02:20:16Z",
        "version": "2.4",
        "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
        "PASS_TO_PASS": '["test_requests.py::RequestsTestCase::test_basic_building"]',
        "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
    }
    row.update(over)
    return row


def swegym_row(instance_id: str = "getmoto__moto-5752", **over) -> dict:
    """As SWE-Gym stores it: test lists as lists, no image name, no data_source."""
    row = {
        "instance_id": instance_id,
        "repo": "getmoto/moto",
        "base_commit": "b2300f1eae1323e3e8bc45f97e530ce129dff12e",
        "patch": "diff --git a/moto/ssm/models.py b/moto/ssm/models.py\n",
        "test_patch": TEST_PATCH,
        "problem_statement": "describe_parameters ignores the Shared filter",
        "hints_text": "",
        "created_at": "2022-12-10T20:23:01Z",
        "version": "4.0",
        "FAIL_TO_PASS": ["tests/test_ssm/test_ssm_boto3.py::test_describe_parameters__shared"],
        "PASS_TO_PASS": ["tests/test_ssm/test_ssm_boto3.py::test_delete_parameter"],
    }
    row.update(over)
    return row


def r2e_row(commit_hash: str = "2222222222222222222222222222222222222222", **over) -> dict:
    """As R2E-Gym stores it: repo_name, docker_image, JSON-encoded commit and expected output."""
    commit = {
        "file_diffs": [],
        "old_commit_hash": "1111111111111111111111111111111111111111",
        "new_commit_hash": commit_hash,
        "commit_message": "BUG: fix to_csv na_rep",
    }
    row = {
        "repo_name": "pandas",
        "docker_image": f"namanjain12/pandas_final:{commit_hash}",
        "commit_hash": commit_hash,
        "parsed_commit_content": json.dumps(commit),
        "problem_statement": "to_csv ignores na_rep for categoricals",
        "expected_output_json": json.dumps({"pandas/tests/io/test_csv.py::test_na_rep": "PASSED"}),
        "relevant_files": ["pandas/io/formats/csvs.py"],
    }
    row.update(over)
    return row


def write_jsonl(path: Path, rows: list) -> Path:
    """Rows as JSONL; a str row is written verbatim (to make broken lines)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tool_env(**extra: str) -> dict[str, str]:
    """The caller's environment without image overrides, plus ``extra``; the hub is never tried; the
    package is this checkout's."""
    env = {k: v for k, v in os.environ.items() if k not in {"SWE_IMAGE_TEMPLATE", "SWE_IMAGE_PREFIX"}}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, **extra)
    return env


def run_tool(
    script: str, *args: str, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run a data/ tool as users do: ``python data/<script> ...``, from outside the repo."""
    return subprocess.run(
        [sys.executable, str(DATA / script), *map(str, args)],
        check=False, capture_output=True, text=True, env=env or tool_env(), cwd=cwd or "/", timeout=120,
    )  # fmt: skip


def load_tool(script: str) -> ModuleType:
    """A data tool's module (``swe_rl.data.<name>``), for in-process tests that patch the `datasets` package."""
    return importlib.import_module(f"swe_rl.data.{Path(script).stem}")
