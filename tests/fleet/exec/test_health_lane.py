"""A node's health check never waits behind its commands or a hung check (no Docker).

`/healthz` is served on threads of its own (`health_lane.py`) from a snapshot a thread takes
(`health.py`): all worker threads held by long commands, or the snapshot's own check stuck on a hung
daemon, must not delay the answer past the pool's health timeout.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from typing import Any

import pytest
import waitress.server

from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.health import HealthMonitor
from swe_rl.fleet.exec.health_lane import health_lane
from swe_rl.fleet.exec.manager import ContainerManager

BOUND = 60.0  # far above any step here: only a hang reaches it


def _get(port: int, path: str, timeout: float = BOUND) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split(b" ", 2)[1]), body


def _serve(app: Any, *, threads: int, lane: bool) -> tuple[Any, threading.Thread, Any]:
    # poll, as the exec server runs it (app.py): a select() the teardown's close races fails with EBADF
    # in waitress's loop thread, where poll() reports the closed descriptor and the loop ends
    server = waitress.server.create_server(
        app, host="127.0.0.1", port=0, threads=threads, asyncore_use_poll=True
    )
    dispatcher = health_lane(server) if lane else None
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    return server, runner, dispatcher


def _stop(server: Any, runner: threading.Thread, dispatcher: Any) -> None:
    server.close()
    server.task_dispatcher.shutdown(timeout=1)
    if dispatcher is not None:
        dispatcher.shutdown(timeout=1)
    runner.join(BOUND)


@pytest.mark.parametrize("lane", [True, False])
def test_health_is_answered_while_every_worker_thread_holds_a_command(lane):
    """One worker thread, held by a long request: with the lane /healthz answers while it is held;
    without it (the old way) the check waits for the thread (the half that shows the test can fail)."""
    holding, release = threading.Event(), threading.Event()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] == "/hold":
            holding.set()
            release.wait(BOUND)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"path": environ["PATH_INFO"]}).encode()]

    server, runner, dispatcher = _serve(app, threads=1, lane=lane)
    held = threading.Thread(target=lambda: _get(server.effective_port, "/hold"))
    try:
        held.start()
        assert holding.wait(BOUND)
        if lane:
            status, body = _get(server.effective_port, "/healthz")
            assert status == 200 and json.loads(body) == {"path": "/healthz"}
            assert not release.is_set()  # answered while the only worker thread was still held
        else:
            with pytest.raises(TimeoutError):  # queued behind the held thread
                _get(server.effective_port, "/healthz", timeout=2.0)
    finally:
        release.set()
        held.join(BOUND)
        _stop(server, runner, dispatcher)


def test_other_paths_still_go_to_the_worker_threads():
    """Only GET /healthz takes the lane: another path is served by the usual worker threads."""
    threads_seen: dict[str, int] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        threads_seen[environ["PATH_INFO"]] = threading.get_ident()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    server, runner, dispatcher = _serve(app, threads=1, lane=True)
    try:
        assert _get(server.effective_port, "/healthz")[0] == 200
        assert _get(server.effective_port, "/other")[0] == 200
        # the lane's threads are not waitress's: another dispatcher's thread served /healthz
        assert threads_seen["/healthz"] != threads_seen["/other"]
    finally:
        _stop(server, runner, dispatcher)


def test_a_stuck_check_makes_the_node_unhealthy_with_its_age():
    """The snapshot thread stuck (a hung daemon, a held lock): the answer is not ok once the snapshot is
    older than `stale_after`, and says why; a fresh snapshot is ok again."""
    now = [100.0]
    monitor = HealthMonitor(lambda: (True, {"x": 1}), stale_after=4.0, clock=lambda: now[0])
    monitor.refresh()
    monitor._thread = threading.current_thread()  # as if started: `current` reads, never takes
    assert monitor.current() == (True, {"x": 1, "health_age": 0.0})
    now[0] += 4.5
    ok, figures = monitor.current()
    assert not ok and figures["health_age"] == 4.5 and "stuck" in figures["error"]
    monitor.refresh()
    assert monitor.current()[0] is True


def test_a_failing_check_is_an_unhealthy_snapshot_not_a_dead_thread():
    def take() -> tuple[bool, dict[str, Any]]:
        raise OSError("daemon socket gone")

    monitor = HealthMonitor(take)
    ok, figures = monitor.current()
    assert not ok and "daemon socket gone" in figures["error"]


def test_the_exec_apps_health_comes_from_its_monitor(tmp_path):
    """The app's /healthz answers the monitor's snapshot: once started, a backend whose ping hangs does
    not hold the answer, which turns unhealthy when the snapshot goes stale."""
    cfg = ExecConfig(token=secrets.token_hex(8), backend="memory", max_warm=0, state_dir=str(tmp_path))
    manager = ContainerManager(cfg)
    pinged, hang, release = threading.Event(), threading.Event(), threading.Event()

    def health() -> bool:
        if hang.is_set():
            pinged.set()
            release.wait(BOUND)  # a hung daemon: released at the test's end
        return True

    manager.backend.health = health  # type: ignore[method-assign]
    app = create_app(manager)
    monitor: HealthMonitor = app.extensions["swe_health"]
    monitor.interval, monitor.stale_after = 0.05, 0.5
    client = app.test_client()
    try:
        monitor.start()
        first = client.get("/healthz")
        assert first.status_code == 200 and first.json["ok"] is True and first.json["docker"] is True
        hang.set()
        assert pinged.wait(BOUND)
        deadline = time.monotonic() + BOUND
        while (answer := client.get("/healthz")).status_code == 200:
            assert time.monotonic() < deadline, "the node stayed healthy with its check hung"
            time.sleep(0.05)
        assert answer.status_code == 503 and answer.json["ok"] is False and "stuck" in answer.json["error"]
    finally:
        release.set()
        monitor.stop()
        manager.stop()
        manager.backend.close()
