"""A hung Docker daemon makes the node unhealthy quickly, and its health check recovers by itself.

The real Docker daemon sits behind a unix-socket proxy that can stop answering (it keeps reading what it
is sent and forwards nothing back: a hung daemon as the SDK sees one). The exec server's backend talks to
the proxy with the real Docker SDK. Before, `/healthz` pinged with the SDK's 600 s timeout.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import threading
import time

import pytest

from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.backend import open_backend
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.health import HealthMonitor
from swe_rl.fleet.exec.manager import ContainerManager

pytestmark = pytest.mark.docker

BOUND = 120.0  # only a hang of the check reaches it (the old ping waited 600 s)
DAEMON = "/var/run/docker.sock"


class HangingProxy:
    """Forwards a unix socket to the Docker daemon until `hang` is set; then answers nothing."""

    def __init__(self, path: str) -> None:
        self.path, self.hang, self.closed = path, threading.Event(), threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(DAEMON)
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self.hang.is_set():
                    continue  # swallowed: the caller waits for an answer that never comes
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.closed.set()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_a_hung_daemon_makes_the_node_unhealthy_and_the_check_comes_back(docker_client, tmp_path):
    sock_dir = tempfile.mkdtemp(prefix="swe-hung-")  # short: a unix socket path has ~100 bytes
    proxy = HangingProxy(os.path.join(sock_dir, "d.sock"))
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
        proxy.close()
        manager.stop()
        backend.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
