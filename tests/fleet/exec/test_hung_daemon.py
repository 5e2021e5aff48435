"""A hung Docker daemon makes the node unhealthy quickly, and its health check recovers by itself.

The real Docker daemon sits behind a unix-socket proxy that can stop answering (it keeps reading what it
is sent and forwards nothing back: a hung daemon as the SDK sees one). The exec server's backend talks to
the proxy with the real Docker SDK. Before, `/healthz` pinged with the SDK's 600 s timeout.
"""

from __future__ import annotations

import os
import secrets
import threading
import time

import pytest

from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.backend import open_backend
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.health import HealthMonitor
from swe_rl.fleet.exec.manager import ContainerManager
from tests.conftest import BASE_IMAGE
from tests.fleet.hanging_docker import HangingProxy, hanging_daemon

pytestmark = pytest.mark.docker

BOUND = 120.0  # only a hang of the check reaches it (the old ping waited 600 s)


def test_a_hung_daemon_makes_the_node_unhealthy_and_the_check_comes_back(docker_client, tmp_path):
    with hanging_daemon() as proxy:
        _check(proxy, tmp_path)


def _check(proxy: HangingProxy, tmp_path) -> None:
    cfg = ExecConfig(token=secrets.token_hex(8), backend="docker", max_warm=0, state_dir=str(tmp_path))
    env = {**os.environ, "DOCKER_HOST": f"unix://{proxy.path}"}
    backend = open_backend(cfg, env)
    manager = ContainerManager(cfg, backend=backend)
    app = create_app(manager)
    monitor: HealthMonitor = app.extensions["swe_health"]
    monitor.interval = 0.2
    client = app.test_client()
    try:
        monitor.start()
        assert client.get("/healthz").json["docker"] is True
        proxy.hang.set()
        deadline = time.monotonic() + BOUND
        while (answer := client.get("/healthz")).status_code == 200:
            assert time.monotonic() < deadline, "the node stayed healthy with its daemon hung"
            time.sleep(0.1)
        assert answer.json["ok"] is False
        # The ping gives up after its own short timeout: the check is not stuck, it reports the daemon
        # down with a fresh snapshot (with the SDK's 600 s timeout it stayed stuck on the first ping).
        while not (answer.json.get("docker") is False and "error" not in answer.json):
            assert time.monotonic() < deadline, f"the health check stayed stuck: {answer.json}"
            time.sleep(0.1)
            answer = client.get("/healthz")
        assert answer.status_code == 503
    finally:
        monitor.stop()
        proxy.hang.clear()
        manager.stop()
        backend.close()


def test_a_call_on_a_daemon_that_hangs_fails_at_once_and_new_calls_are_refused(docker_client, tmp_path):
    """An exec waiting on the daemon when it hangs answers 503 as soon as the pings say so (before: the
    SDK's 600 s), and the next call is refused without touching the daemon (daemon_watch.py)."""
    with hanging_daemon() as proxy:
        cfg = ExecConfig(token=secrets.token_hex(8), backend="docker", max_warm=0, state_dir=str(tmp_path))
        backend = open_backend(cfg, {**os.environ, "DOCKER_HOST": f"unix://{proxy.path}"})
        manager = ContainerManager(cfg, backend=backend)
        app = create_app(manager)
        monitor: HealthMonitor = app.extensions["swe_health"]
        monitor.interval = 0.2
        client = app.test_client()
        auth = {"Authorization": f"Bearer {cfg.token}"}
        cid = None
        try:
            monitor.start()
            created = client.post("/container/create", json={"image": BASE_IMAGE}, headers=auth)
            assert created.status_code == 200, created.json
            cid = created.json["container_id"]
            answer: dict = {}
            # a command that never ends, with a timeout past the bound: only the watch can end the call
            call = {"container_id": cid, "command": "touch /tmp/on; sleep 100000", "timeout": 3000}

            def run() -> None:
                got = client.post("/container/exec", json=call, headers=auth)
                answer.update(status=got.status_code, body=got.json)

            running = threading.Thread(target=run, daemon=True)
            running.start()
            probe = {"container_id": cid, "command": "test -f /tmp/on", "timeout": 30}
            while client.post("/container/exec", json=probe, headers=auth).json["returncode"] != 0:
                pass  # until the long command runs
            proxy.hang.set()
            running.join(BOUND)
            assert not running.is_alive(), "the exec kept waiting on the hung daemon"
            assert answer["status"] == 503 and "answering" in answer["body"]["error"], answer
            refused = client.post("/container/exec", json=probe, headers=auth)
            assert refused.status_code == 503 and "not answering" in refused.json["error"]
        finally:
            monitor.stop()
            proxy.hang.clear()
            if cid is not None:
                docker_client.api.remove_container(cid, force=True)
            manager.stop()
            backend.close()
