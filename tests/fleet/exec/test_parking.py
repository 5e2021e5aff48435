"""Parked requests on a real waitress server (no Docker): a waiting call holds no worker thread.

A plain WSGI app parks each `/wait/<n>` request on an event the test sets (`parking.py`); with one worker
thread, five parked calls leave it free for another request, and each then answers its own body in
order on its own connection. A server without parking channels (the old way) gives the app no slot.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import waitress.server

from swe_rl.fleet.exec.parking import PARK_KEY, Slot, park_requests

BOUND = 60.0  # far above any step here: only a hang reaches it


class _Event:
    """What the app waits for: `on_end` as the command lane's streams offer it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._callbacks: list[Any] = []

    def on_end(self, callback: Any) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()

    def set(self) -> None:
        with self._lock:
            self._done, callbacks = True, self._callbacks
        for callback in callbacks:
            callback()


def _send(port: int, path: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    return s


def _answer(s: socket.socket) -> tuple[int, bytes]:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split(b" ", 2)[1]), body


def test_parked_calls_leave_the_only_worker_thread_free():
    events = {n: _Event() for n in range(5)}
    parked = threading.Semaphore(0)
    resumed_on: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ["PATH_INFO"]
        slot: Slot | None = environ.get(PARK_KEY)
        if path.startswith("/wait/"):
            assert slot is not None
            if not slot.resumed:
                n = int(path.rsplit("/", 1)[1])
                parked.release()
                slot.park(n, events[n].on_end)
            resumed_on.append(path)
            body = f"waited {slot.state}".encode()
        else:
            body = b"free"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    server = park_requests(waitress.server.create_server(app, host="127.0.0.1", port=0, threads=1))
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    port = server.effective_port
    try:
        waiting = {n: _send(port, f"/wait/{n}") for n in events}
        for _ in events:
            assert parked.acquire(timeout=BOUND)
        assert _answer(_send(port, "/other")) == (200, b"free")  # the one thread is not held
        assert resumed_on == []
        for n in (3, 1, 4, 0, 2):  # ended in any order: each answers its own
            events[n].set()
            assert _answer(waiting[n]) == (200, f"waited {n}".encode())
        assert sorted(resumed_on) == [f"/wait/{n}" for n in range(5)]
    finally:
        for event in events.values():
            event.set()
        server.close()
        server.task_dispatcher.shutdown(timeout=1)
        runner.join(BOUND)


def test_a_command_that_ended_before_the_thread_left_is_resumed_once():
    """`on_end` calling back at once (the command ended while its call was parking): one resume, after
    the parking thread left, never two passes at once."""
    passes: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        slot: Slot = environ[PARK_KEY]
        if not slot.resumed:
            passes.append("park")
            slot.park("x", lambda callback: callback())
        passes.append("resume")
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    server = park_requests(waitress.server.create_server(app, host="127.0.0.1", port=0, threads=2))
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    try:
        assert _answer(_send(server.effective_port, "/x")) == (200, b"ok")
        assert passes == ["park", "resume"]
    finally:
        server.close()
        server.task_dispatcher.shutdown(timeout=1)
        runner.join(BOUND)
