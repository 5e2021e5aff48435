"""The Go, JavaScript and Rust fixtures (data/fixtures/multilang/) are well-formed rows in swebench 5.x's
shape: the JSONL file is up to date, every row names a registered parser and carries 5.x's fields, and
the gold and test patches apply to the committed sources (no Docker here; the images and real runs are
checked in tests/grading/test_multilang_fleet.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.grading.integrity import patch_paths
from swe_rl.grading.parsers import PARSERS

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "data" / "fixtures" / "multilang"
ROWS = [
    json.loads(x) for x in (ROOT / "data/fixtures/instances_multilang.jsonl").read_text().splitlines() if x
]


def test_the_jsonl_is_up_to_date():
    done = subprocess.run(
        [sys.executable, "-m", "data.fixtures.multilang.make_multilang", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
def test_rows_carry_swebench_5_fields(row):
    assert row["log_parser"] in PARSERS
    assert row["eval_type"] == "pass_and_fail" and row["image"] == row["image_name"]
    assert row["repo_language"] in {"go", "javascript", "rust"}
    assert json.loads(row["FAIL_TO_PASS"]) and json.loads(row["PASS_TO_PASS"])
    assert ": '>>>>> Start Test Output'" in row["eval_script"] and row["base_commit"] in row["eval_script"]


@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
def test_patches_apply_to_the_sources(row, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(HERE / row["instance_id"] / "source", repo)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for name in ("patch", "test_patch"):
        done = subprocess.run(
            ["git", "apply", "--check", "-"], cwd=repo, input=row[name], capture_output=True, text=True
        )
        assert done.returncode == 0, (name, done.stderr)
    assert not set(patch_paths(row["patch"])) & set(patch_paths(row["test_patch"]))  # gold touches no test
