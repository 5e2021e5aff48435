"""Ctrl-C during an eval on the real local fleet: a clean stop, artifacts for what finished, exit 130,
every lease released; a resume finishes the rest and the summary adds both runs up."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from swe_rl.fleet.local import LocalFleet
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI
from tests.conftest import ROOT

ALL_FIXTURES = ROOT / "data/fixtures/instances.jsonl"
# The five plain fixtures (the others need a named network, are flaky on purpose, or carry exploits' bait):
# the counts below ("2 of 5") are about stopping and resuming, not about the fixtures.
IDS = [
    "jpvanhal__inflection-9001",
    "more-itertools__more-itertools-9001",
    "more-itertools__more-itertools-9002",
    "pytoolz__toolz-9001",
    "pytoolz__toolz-9002",
]
FIXTURES: Path = ALL_FIXTURES  # replaced by the `plain_fixtures` file for the tests of this module
SUBMIT = (
    "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```"
)


@pytest.fixture(scope="module", autouse=True)
def plain_fixtures(tmp_path_factory):
    """A data file of the five plain fixture instances."""
    global FIXTURES
    rows = [
        line
        for line in ALL_FIXTURES.read_text().splitlines()
        if line.strip() and json.loads(line)["instance_id"] in IDS
    ]
    assert len(rows) == len(IDS)
    path = tmp_path_factory.mktemp("data") / "instances.jsonl"
    path.write_text("\n".join(rows) + "\n")
    FIXTURES = path
    yield path
    FIXTURES = ALL_FIXTURES


@pytest.fixture(scope="module")
def fleet(docker_client):
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)
    with LocalFleet(exec_servers=1, max_containers_per_node=8) as f:
        yield f


def fleet_containers(fleet: LocalFleet) -> list:
    import docker

    listed = docker.from_env().containers.list(
        all=True, filters={"label": "swe-rl.managed-by=swe-rl"}, ignore_removed=True
    )  # containers may go while listed
    return [
        c
        for c in listed
        if c.labels.get("swe-rl.exec-server") in fleet.server_ids and "swe-rl.warm" not in c.labels
    ]


def pool_leases(fleet: LocalFleet) -> int:
    r = httpx.get(f"{fleet.pool_url}/status", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=10)
    return r.json()["totals"]["leases"]


class Gate:
    """Replies at once for the first `fast` requests (submit, one turn each), then slowly until opened."""

    def __init__(self, fast: int) -> None:
        self.fast, self.count, self.open = fast, 0, threading.Event()
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> ChatReply:
        with self.lock:
            self.count += 1
            n = self.count
        return ChatReply(SUBMIT) if n <= self.fast or self.open.is_set() else ChatReply(SUBMIT, delay=25.0)


def eval_cmd(out: Path, api_base: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "eval/eval_swe.py"),
        "--data",
        str(FIXTURES),
        "--output-dir",
        str(out),
        "--model",
        "openai/fake",
        "--api-base",
        api_base,
        "--max-concurrent",
        "2",
        "--no-progress",
    ]


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def rows(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def test_sigint_stops_cleanly_and_a_resume_adds_up(fleet, tmp_path):
    out = tmp_path / "run"
    gate = Gate(fast=2)
    env = {**os.environ, **fleet.client_env(), "PYTHONPATH": str(ROOT)}
    with FakeOpenAI([gate] * 40) as server:
        cmd = eval_cmd(out, server.base_url)
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )  # its own process group, as a terminal job is
        try:
            wait_for(
                lambda: len(rows(out)) >= 2 and gate.count >= 4, 180, "two finished instances and two running"
            )
            assert pool_leases(fleet) >= 1  # the running instances hold containers
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
            stdout, stderr = proc.communicate(timeout=20)  # well before the slow replies (25 s) would come
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith(
            "interrupted (SIGINT): 2 of 5 instances finished; run the same command again to resume:"
        )
        # the interpreter that ran, as a module: the line runs as it is (a bare `python` may be another)
        assert f"{shlex.quote(sys.executable)} -m swe_rl.eval.eval_swe " in last and "--output-dir" in last
        summary = json.loads((out / "summary.json").read_text())
        assert summary["finished"] == 2 and summary["missing"] == len(IDS) - 2
        assert summary["interrupted"] == "SIGINT" and len(summary["runs"]) == 1
        assert (
            "interrupted" in (out / "report.html").read_text()
            or "SIGINT" in (out / "report.html").read_text()
        )
        # nothing leaked: every lease released and every container gone while the fleet keeps running
        assert pool_leases(fleet) == 0
        wait_for(lambda: not fleet_containers(fleet), 30, "the fleet's containers to go")

        gate.open.set()  # resume: the same command, now with a responsive model
        resumed = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: 2 of 5 instances already finished" in resumed.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == len(IDS) and summary["missing"] == 0 and summary["interrupted"] is None
    runs = summary["runs"]
    assert [r["interrupted"] for r in runs] == ["SIGINT", None]
    assert [r["finished"] for r in runs] == [2, len(IDS) - 2]
    assert summary["wall_seconds"] == pytest.approx(sum(r["wall_seconds"] for r in runs), abs=0.01)
    assert summary["wall_seconds"] > runs[-1]["wall_seconds"]
    done = [r["instance_id"] for r in rows(out)]
    assert sorted(done) == sorted(IDS)  # each instance has exactly one row: none ran twice, none lost
    assert pool_leases(fleet) == 0 and not fleet_containers(fleet)


def test_sigterm_on_the_local_fleet_path(docker_client, tmp_path):
    """`--local-fleet`: SIGTERM (a scheduler stopping the job) stops as cleanly; the fleet goes with it."""
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)
    out = tmp_path / "run"
    gate = Gate(fast=1)
    with FakeOpenAI([gate] * 20) as server:
        proc = subprocess.Popen(
            [*eval_cmd(out, server.base_url), "--local-fleet", "--max-concurrent", "1"],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: len(rows(out)) >= 1 and gate.count >= 2, 180, "one finished instance, one running"
            )
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=40)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 130, stderr
    assert "interrupted (SIGTERM): 1 of 5 instances finished" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 1 and summary["runs"][0]["interrupted"] == "SIGTERM"


def test_sigint_during_grading_predictions(fleet, tmp_path):
    """eval/grade_predictions.py stops the same way; a resume grades only the rest."""
    preds = {}
    for line in FIXTURES.read_text().splitlines():
        row = json.loads(line)
        preds[row["instance_id"]] = {
            "instance_id": row["instance_id"],
            "model_patch": row["patch"],
            "model_name_or_path": "gold",
        }
    (tmp_path / "preds.json").write_text(json.dumps(preds))
    out = tmp_path / "graded"
    cmd = [
        sys.executable,
        str(ROOT / "eval/grade_predictions.py"),
        "--preds",
        str(tmp_path / "preds.json"),
        "--data",
        str(FIXTURES),
        "--output-dir",
        str(out),
        "--max-concurrent",
        "1",
    ]
    env = {**os.environ, **fleet.client_env(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(rows(out)) >= 1, 180, "one graded prediction")
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "predictions finished; run the same command again to resume:" in stderr.strip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    graded = summary["finished"]
    assert 1 <= graded < len(IDS) and summary["interrupted"] == "SIGINT" and summary["resolved"] == graded
    assert pool_leases(fleet) == 0
    wait_for(lambda: not fleet_containers(fleet), 30, "the fleet's containers to go")
    resumed = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resolved"] == len(IDS) and [r["finished"] for r in summary["runs"]] == [
        graded,
        len(IDS) - graded,
    ]
