"""A node's time starts when its server read the request, not when a worker thread took it (no Docker).

Under a burst a request waits in waitress's queue for a thread; that wait is the node's. Counted from the
app, it landed in the pool's overhead (`x-swe-pool-overhead-seconds` = pool handling - node time).
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from typing import Any

import waitress.server

from swe_rl.fleet.call_headers import NODE_SECONDS_HEADER
from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.arrival import ARRIVAL_KEY, stamp_arrivals
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.manager import ContainerManager

BOUND = 60.0  # far above any step here: only a hang reaches it


def _get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1]


def test_a_request_queued_for_a_thread_is_stamped_when_read():
    """One worker thread, held by a first request: the second is read (stamped) before the thread is
    free, and its stamp is earlier than the moment its handler started."""
    holding, release = threading.Event(), threading.Event()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        started = time.monotonic()
        if environ["PATH_INFO"] == "/hold":
            holding.set()
            release.wait(BOUND)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"arrival": environ.get(ARRIVAL_KEY), "started": started}).encode()]

    server = stamp_arrivals(waitress.server.create_server(app, host="127.0.0.1", port=0, threads=1))
    assert server.channel_class.__name__ == "StampedChannel"
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    answers: dict[str, bytes] = {}
    try:
        port = server.effective_port
        first = threading.Thread(target=lambda: answers.update(hold=_get(port, "/hold")))
        first.start()
        assert holding.wait(BOUND)
        second = threading.Thread(target=lambda: answers.update(now=_get(port, "/now")))
        second.start()
        deadline = time.monotonic() + BOUND
        while sum(bool(getattr(c, "requests", None)) for c in list(server._map.values())) < 2:
            assert time.monotonic() < deadline, "the second request was never read"
            time.sleep(0.001)  # until the server has read the second request (it waits for the thread)
        released = time.monotonic()
        release.set()
        first.join(BOUND)
        second.join(BOUND)
    finally:
        release.set()
        server.close()
        runner.join(BOUND)
    now = json.loads(answers["now"])
    assert now["arrival"] is not None and now["arrival"] < released <= now["started"]
    assert json.loads(answers["hold"])["arrival"] < now["arrival"]


def test_the_exec_apps_node_time_starts_at_the_stamp(tmp_path):
    """The exec app's `x-swe-node-seconds` counts from the server's stamp; without one, from the app."""
    cfg = ExecConfig(token=secrets.token_hex(8), backend="memory", max_warm=0, state_dir=str(tmp_path))
    manager = ContainerManager(cfg)
    try:
        client = create_app(manager).test_client()
        queued = client.get("/healthz", environ_base={ARRIVAL_KEY: time.monotonic() - 5.0})
        assert float(queued.headers[NODE_SECONDS_HEADER]) >= 5.0
        unstamped = client.get("/healthz")
        assert float(unstamped.headers[NODE_SECONDS_HEADER]) < 5.0
    finally:
        manager.stop()
        manager.backend.close()
