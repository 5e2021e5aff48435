"""100 commands waiting at once on a real exec server hold no thread each (`parking.py`, `command_lane.py`).

The server runs with 8 worker threads. 100 execs each wait until the test writes to a FIFO in the
container; while all 100 wait, the server process has far fewer threads than commands (read from
/proc/<pid>/task), `/healthz` and a short exec answer, and once it wrote every call answers its
own output. The old server (a thread per waiting command) ran 8 of them and the rest queued: the wait
for 100 started commands never ended.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.conftest import BASE_IMAGE

COMMANDS = 100
THREADS = 8
BOUND = 300.0  # far above any step here: only a hang reaches it
WAIT = "exec 3<>/tmp/w/go; touch /tmp/w/started-{i}; read -r _ <&3; echo done-{i}"
"""Waits, with no process running, for a line on the FIFO `go` (held open read-write, so its open never
blocks and a read waits for data; bash reads a pipe a byte at a time, so each command takes one line)."""
RELEASE = f"printf '%.0s\\n' $(seq {COMMANDS}) > /tmp/w/go"


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _started(container) -> int:
    res = container.exec_run(["sh", "-c", "ls /tmp/w 2>/dev/null | grep -c '^started-' || true"])
    return int(res.output.decode().strip() or 0)


def test_waiting_commands_hold_no_thread_each(exec_server_factory, docker_client):
    srv = exec_server_factory(SWE_EXEC_THREADS=str(THREADS))
    r = srv.post("/container/create", {"image": BASE_IMAGE, "pids_limit": 4096})
    assert r.status_code == 200, r.text
    cid = r.json()["container_id"]
    container = docker_client.containers.get(cid)
    assert container.exec_run(["sh", "-c", "mkdir -p /tmp/w && mkfifo /tmp/w/go"]).exit_code == 0

    def run(i: int) -> httpx.Response:
        return srv.post(
            "/container/exec",
            {"container_id": cid, "command": WAIT.format(i=i), "timeout": BOUND},
            timeout=BOUND + 60,
        )

    with ThreadPoolExecutor(COMMANDS) as pool:
        calls = [pool.submit(run, i) for i in range(COMMANDS)]
        try:
            deadline = time.monotonic() + BOUND
            while _started(container) < COMMANDS:
                assert time.monotonic() < deadline, (
                    f"only {_started(container)} of {COMMANDS} commands started"
                )
                assert not any(c.done() for c in calls), [c.result().text for c in calls if c.done()][:3]
                time.sleep(0.5)

            threads = _threads(srv.proc.pid)
            assert threads < COMMANDS // 2, f"{threads} threads for {COMMANDS} waiting commands"
            health = srv.get("/healthz")
            assert health.status_code == 200 and health.json()["calls_in_flight"] >= COMMANDS
            short = srv.post("/container/exec", {"container_id": cid, "command": "echo short"})
            assert short.status_code == 200 and short.json()["output"] == "short\n"
            assert not any(c.done() for c in calls)  # all still waiting
            assert _threads(srv.proc.pid) < COMMANDS // 2
        finally:
            container.exec_run(["bash", "-c", RELEASE])
        answers = [c.result(timeout=BOUND) for c in calls]
    for i, answer in enumerate(answers):
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["returncode"], body["output"], body["timed_out"]) == (0, f"done-{i}\n", False)
