"""The real-task set (data/real_tasks/instances.jsonl): tasks mined by `swe-mine-tasks` from releases of
real upstream libraries, certified. Fast: the rows load and name what grading needs. Docker: the
images are built by data/real_tasks/build.sh (offline from the registries' releases, once per
machine), and on every row the gold patch resolves, the empty patch does not, and our verdict and
per-test maps equal swebench 5.x's own on the same logs (`assert_same` of test_official_5x).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from swe_rl.grading import grade
from swe_rl.grading.parsers import PARSERS
from swe_rl.tasks import instance_from_row, official_script
from tests.grading.test_official_5x import ROOT, assert_same, official  # noqa: F401 - official: a fixture

ROWS_FILE = ROOT / "data/real_tasks/instances.jsonl"
ROWS = [json.loads(line) for line in ROWS_FILE.read_text().splitlines() if line.strip()]


def test_the_real_rows_load_and_name_a_registered_parser():
    assert len(ROWS) >= 12 and len({r["repo"] for r in ROWS}) >= 4
    assert {r["language"] for r in ROWS} == {"python", "go", "javascript", "rust"}
    for row in ROWS:
        inst = instance_from_row(row)
        assert inst.fail_to_pass and inst.eval_type == "pass_and_fail" and inst.log_parser in PARSERS
        assert inst.image.startswith("swe-rl/real.") and inst.problem_statement.strip()
        assert row["mined_commit"] and len(inst.base_commit) == 40
        if not row["test_patch"]:  # an injected bug (one release only): the row says so, the statement not
            assert "SWE-smith method" in row["provenance"], row["instance_id"]
            assert "SWE-smith" not in row["problem_statement"] and "inject" not in row["problem_statement"]


@pytest.fixture(scope="module")
def real_images(docker_client, base_image):
    env = {**os.environ, "PYTHON": sys.executable}  # the interpreter that has this checkout's swe_rl
    proc = subprocess.run(
        ["bash", str(ROOT / "data/real_tasks/build.sh")], capture_output=True, text=True, check=False, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]


def run_row(image: str, script: str, patch: str) -> str:
    """The eval script's output in a fresh container of the task's image (patch applied first)."""
    apply = (
        f"cd /testbed && git apply -v - <<'EOF_REAL_TASK'\n{patch}EOF_REAL_TASK\n" if patch.strip() else ""
    )
    proc = subprocess.run(
        ["docker", "run", "-i", "--rm", "--name", f"swe-rl-test-real-{uuid.uuid4().hex[:12]}",
         "--label", "swe-rl.test=real-tasks", "--network", "none", image, "/bin/bash", "-c", "exec 2>&1; bash -s"],
        input=apply + script, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    return proc.stdout


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
def test_gold_resolves_the_empty_patch_does_not_and_maps_equal_swebench(official, real_images, tmp_path, row):  # noqa: F811
    gold_and_empty_as_swebench(official, instance_from_row(row), tmp_path)


def gold_and_empty_as_swebench(official, inst, tmp_path) -> None:  # noqa: F811 - official: the fixture's value
    """The row's image run with its gold patch and with none: gold resolves, empty does not, and both logs
    map to swebench's own verdicts (also used by the mined set's sample)."""
    script = official_script(inst.eval_script or "")
    for label, patch in (("gold", inst.patch), ("empty", "")):
        log = run_row(inst.image, script, patch)
        assert ">>>>> Test Exit Code:" in log, log[-2000:]
        assert_same(official, inst, log, tmp_path)
        verdict = grade(inst, patch="p", apply_status="applied", test_log=log).resolved
        assert verdict is (label == "gold"), (label, log[-2000:])
