"""Ctrl-C and SIGTERM of swe-certify and swe-eval while grading runs, as a user sends them: real processes
with their own local fleet (`--local-fleet`), the signal to the process group, then the Docker daemon asked.

Each stops (a generous bound that only rules out a hang: it once took 54 s, or never came back), exits
130, says what it waits for while it waits, and leaves no container of its fleet, grading ones included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swe_rl.fleet.protocol import LABEL_MANAGED, LABEL_SERVER, MANAGED_VALUE
from tests.conftest import ROOT

pytestmark = pytest.mark.docker

FIXTURES = ROOT / "data/fixtures/instances.jsonl"
PLAIN = ["jpvanhal__inflection-9001", "more-itertools__more-itertools-9001", "pytoolz__toolz-9001"]


@pytest.fixture(scope="module")
def fixture_images(docker_client):
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)


def fleet_server_ids(pid: int) -> set[str]:
    """The exec-server ids of the local fleet a process started (read from its children's environment)."""
    ids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for var in env:
            if var.startswith(b"SWE_EXEC_SERVER_ID="):
                ids.add(var.split(b"=", 1)[1].decode())
    return ids


def containers_of(docker_client, server_ids: set[str]) -> list:
    listed = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_MANAGED}={MANAGED_VALUE}"}, ignore_removed=True
    )
    return [c for c in listed if c.labels.get(LABEL_SERVER) in server_ids]


def stop_while_grading(docker_client, cmd: list[str], sig: signal.Signals) -> tuple[int, str, set[str]]:
    """Start `cmd`, wait for two of its containers, send `sig` to its process group; (rc, stderr, fleet ids)."""
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal job is
    )
    ids: set[str] = set()
    try:
        deadline = time.monotonic() + 300
        while not (ids and len(containers_of(docker_client, ids)) >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never had two containers"
            ids = ids or fleet_server_ids(proc.pid)
            time.sleep(0.3)
        os.killpg(proc.pid, sig)
        _, stderr = proc.communicate(timeout=180)  # a bound that only rules out a hang
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, stderr, ids


def test_certify_stops_on_sigterm_and_leaves_no_container(fixture_images, docker_client, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "swe_rl.eval.certify",
        "run",
        "--data",
        str(FIXTURES),
        "--ledger",
        str(ledger),
    ]
    cmd += ["--instance-ids", ",".join(PLAIN), "--runs", "3", "--max-concurrent", "3", "--local-fleet"]
    rc, stderr, ids = stop_while_grading(docker_client, [*cmd, "--no-progress"], signal.SIGTERM)
    assert rc == 130, stderr
    assert "SIGTERM: stopping" in stderr and "stopping: releasing" in stderr, stderr
    assert "run the same command again to resume" in stderr
    assert containers_of(docker_client, ids) == []
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        json.loads(line)  # whole rows only: a cancelled instance wrote none


def test_eval_stops_on_ctrl_c_while_grading_and_leaves_no_container(fixture_images, docker_client, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "swe_rl.eval.eval_swe", "--data", str(FIXTURES), "--output-dir", str(out)]
    cmd += ["--instance-ids", ",".join(PLAIN), "--policy", "gold", "--max-concurrent", "3", "--local-fleet"]
    rc, stderr, ids = stop_while_grading(docker_client, [*cmd, "--no-progress"], signal.SIGINT)
    assert rc == 130, stderr
    assert "SIGINT: stopping" in stderr and "stopping: releasing" in stderr, stderr
    assert containers_of(docker_client, ids) == []
    assert json.loads((out / "summary.json").read_text())["interrupted"] == "SIGINT"
