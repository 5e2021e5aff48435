"""SIGTERM drains the node: no new container lands there, the calls in flight finish, leased containers
stay for the next start (a real exec server process, a real container)."""

from __future__ import annotations

import signal
import threading

from tests.conftest import BASE_IMAGE

BOUND = 120.0  # only a hang reaches it


def test_sigterm_lets_a_running_command_finish_refuses_new_containers_and_keeps_the_lease(
    exec_server_factory, docker_client
):
    srv = exec_server_factory(SWE_EXEC_DRAIN_SECONDS="300")
    created = srv.post("/container/create", {"image": BASE_IMAGE}).json()
    cid = created["container_id"]
    answer: dict = {}
    command = "touch /tmp/started; while [ ! -f /tmp/go ]; do sleep 0.1; done; echo finished"
    running = threading.Thread(
        target=lambda: answer.update(
            srv.post(
                "/container/exec", {"container_id": cid, "command": command, "timeout": 300}, timeout=BOUND
            ).json()
        )
    )
    running.start()
    try:
        probe = {"container_id": cid, "command": "test -f /tmp/started", "timeout": 30}
        while srv.post("/container/exec", probe).json()["returncode"] != 0:
            pass  # until the long command runs
        srv.proc.send_signal(signal.SIGTERM)
        health = srv.get("/healthz")
        while not health.json().get("draining"):
            health = srv.get("/healthz")
        assert health.status_code == 200  # up: calls on its leases go on
        refused = srv.post("/container/create", {"image": BASE_IMAGE})
        assert refused.status_code == 503 and refused.json()["draining"] is True
        # a call on the lease is still served while draining: it lets the long command end
        wrote = srv.post("/container/write_file", {"container_id": cid, "path": "/tmp/go", "content": ""})
        assert wrote.status_code == 200, wrote.text
    finally:
        running.join(BOUND)
    assert answer.get("returncode") == 0 and answer["output"].strip() == "finished"
    assert srv.proc.wait(BOUND) == 0
    assert docker_client.containers.get(cid).status == "running"  # kept for the next start
    srv.restart()
    again = srv.post(
        "/container/exec", {"container_id": cid, "command": "echo adopted", "timeout": 30}
    ).json()
    assert again["output"].strip() == "adopted"
