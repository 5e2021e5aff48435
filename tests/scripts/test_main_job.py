"""The README's main job, run as a user runs it: `bash scripts/run_local_eval.sh` (set-up skipped: the
test session has done it) with the gold policy on every bundled task, on a local fleet.

Gold resolves all 10 bundled instances, the `pytoolz__toolz-9004` one on the internal network its row
names (made by the local fleet, gone after); a run where an instance ends in env_error exits non-zero
and says why.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from swe_rl.fleet import local_networks
from swe_rl.tasks import load_instances
from tests.conftest import ROOT, TEST_ID_PREFIX

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FIXTURES = ROOT / "data" / "fixtures" / "instances.jsonl"
ROW_NETWORK = "swe-rl-internal"


@pytest.fixture(scope="module")
def bundled(docker_client, base_image) -> list[str]:
    """The bundled instance ids; their images are built offline when missing."""
    loaded = load_instances(FIXTURES)
    assert loaded.ok, loaded.errors
    missing = []
    for inst in loaded.instances:
        if not docker_client.images.list(name=inst.image):
            missing.append(inst.instance_id)
    if missing:
        subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh"), *missing], check=True)
    return [i.instance_id for i in loaded.instances]


def main_job(out, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # this checkout's swe_rl, in the fleet's servers too
        "SWE_SKIP_SETUP": "1",
        "OUTPUT_DIR": str(out),
        **env,
    }
    return subprocess.run(
        ["bash", str(ROOT / "scripts/run_local_eval.sh"), "--no-progress", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def test_gold_resolves_every_bundled_task(bundled, docker_client, tmp_path):
    network_before = bool(docker_client.networks.list(names=[ROW_NETWORK]))
    out = tmp_path / "run"
    p = main_job(out)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert len(bundled) == 10
    assert summary["total"] == summary["finished"] == summary["resolved"] == 10, summary
    assert summary["resolve_rate"] == 1.0 and summary["error_rate"] == 0.0 and summary["missing"] == 0
    assert summary["status_counts"]["resolved"] == 10
    assert sum(summary["status_counts"].values()) == 10
    rows = {r["instance_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert sorted(rows) == sorted(bundled)
    assert rows["pytoolz__toolz-9004"]["grading_network"] == ROW_NETWORK
    printed = json.loads(p.stdout[p.stdout.index("{") : p.stdout.index("\n}") + 2])
    assert printed["resolved"] == 10 and printed["total"] == 10
    assert "gold: resolved 10 of 10 as expected" in p.stdout
    # the fleet made the row's network only for the run: gone after it, unless it was there before or a
    # fleet beside this run (another test grading that row) uses it now (read under the users file's lock)
    with local_networks._users(ROW_NETWORK) as users:
        there = bool(docker_client.networks.list(names=[ROW_NETWORK]))
        assert not there or network_before or users, "the run left the row's network behind"


def test_an_env_error_fails_the_run_and_says_why(bundled, tmp_path):
    row = json.loads(FIXTURES.read_text().splitlines()[0])
    row["image_name"] = f"swe-rl/{TEST_ID_PREFIX}no-such-image:latest"
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(row) + "\n")
    out = tmp_path / "run"
    p = main_job(out, DATA=str(data))
    assert p.returncode == 3, p.stdout + p.stderr
    assert "1 of 1 instances ended in env_error" in p.stderr
    assert row["instance_id"] in p.stderr and "no-such-image" in p.stderr
    assert json.loads((out / "summary.json").read_text())["status_counts"]["env_error"] == 1
