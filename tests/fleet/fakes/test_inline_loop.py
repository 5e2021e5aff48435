"""The simulated nodes' inline loop (`swe_rl/fleet/fakes/inline_loop.py`) over real sockets on loopback.

It replaces waitress's loop and worker threads in the simulated fleet's helpers, so it must answer as
waitress does: idle kept-alive connections and busy ones, pipelined requests in order, an answer larger
than a socket's buffer to a slow reader while others are served, connections closed by the peer leaving
the map, waitress's idle-close maintenance, an app's exception as a 500; and it must not ask the idle
connections on every turn (what it is for: counted here).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import waitress.server

from swe_rl.fleet.fakes import inline_loop
from swe_rl.fleet.fakes.inline_loop import InlineDispatcher

BOUND = 60.0  # far above any step here: only a hang reaches it
BIG = 48 * 1024 * 1024  # more than loopback's socket buffers hold: the server must wait to write


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    if path == "/boom":
        raise RuntimeError("the app failed")
    body = b"x" * BIG if path == "/big" else path.encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


class Served:
    def __init__(self, **adjust: Any) -> None:
        self.dispatcher = InlineDispatcher()
        self.server = waitress.server.create_server(
            app, host="127.0.0.1", port=0, _dispatcher=self.dispatcher, asyncore_use_poll=True, **adjust
        )
        self.port = self.server.effective_port
        self.stop = threading.Event()
        self.thread = threading.Thread(target=inline_loop.run, args=(self.server, self.dispatcher, self.stop))
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.server.pull_trigger()  # from this thread: wakes the loop, which sees the stop
        self.thread.join(BOUND)
        assert not self.thread.is_alive()
        for obj in list(self.server._map.values()):
            obj.close()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served(connection_limit=1000)
    yield s
    s.close()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def _read_answer(s: socket.socket, buffered: bytearray) -> tuple[int, bytes]:
    while b"\r\n\r\n" not in buffered:
        chunk = s.recv(65536)
        assert chunk, "connection closed before an answer"
        buffered += chunk
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    length = int(
        next(v for k, v in (h.split(b": ", 1) for h in head.split(b"\r\n")[1:]) if k == b"Content-Length")
    )
    while len(rest) < length:
        chunk = s.recv(1 << 20)
        assert chunk, "connection closed mid-answer"
        rest += chunk
    del buffered[:]
    buffered += rest[length:]
    return int(head.split(b" ", 2)[1]), rest[:length]


def _get(s: socket.socket, path: str) -> tuple[int, bytes]:
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return _read_answer(s, bytearray())


def test_idle_and_busy_connections_are_all_answered_then_the_idle_ones_again(served):
    idle = [_connect(served.port) for _ in range(100)]
    try:
        for s in idle[:4]:
            for i in range(20):
                assert _get(s, f"/busy/{i}") == (200, f"/busy/{i}".encode())
        for i, s in enumerate(idle):
            assert _get(s, f"/again/{i}") == (200, f"/again/{i}".encode())
    finally:
        for s in idle:
            s.close()


def test_pipelined_requests_are_answered_in_order(served):
    with _connect(served.port) as s:
        s.sendall(b"".join(f"GET /p{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(10)))
        buffered = bytearray()
        assert [_read_answer(s, buffered) for _ in range(10)] == [(200, f"/p{i}".encode()) for i in range(10)]


def test_a_big_answer_to_a_slow_reader_does_not_hold_the_others(served):
    slow = _connect(served.port)
    try:
        slow.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)  # the server has filled the socket's buffers and waits for the reader
        with _connect(served.port) as other:
            assert _get(other, "/meanwhile") == (200, b"/meanwhile")
        pending = [c for c in served.server._map.values() if getattr(c, "total_outbufs_len", 0)]
        assert pending, "the big answer was sent whole at once: the test did not make the server wait"
        status, body = _read_answer(slow, bytearray())
        assert status == 200 and len(body) == BIG
    finally:
        slow.close()


def test_an_exception_in_the_app_is_a_500_and_the_loop_serves_on(served):
    with _connect(served.port) as s:
        status, _ = _get(s, "/boom")
        assert status == 500
    with _connect(served.port) as s:
        assert _get(s, "/after") == (200, b"/after")


def _channels(served: Served) -> int:
    return sum(1 for obj in list(served.server._map.values()) if hasattr(obj, "requests"))


def _until(predicate: Any) -> None:
    deadline = time.monotonic() + BOUND
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def test_connections_closed_by_the_peer_leave_the_map(served):
    conns = [_connect(served.port) for _ in range(30)]
    for s in conns:
        assert _get(s, "/x")[0] == 200
    assert _channels(served) == 30
    for s in conns:
        s.close()
    _until(lambda: _channels(served) == 0)
    with _connect(served.port) as s:  # descriptors reused by new connections are served
        assert _get(s, "/y") == (200, b"/y")


def test_idle_connections_are_closed_by_waitress_maintenance(monkeypatch):
    monkeypatch.setattr(inline_loop, "FULL_PASS_EVERY", 0.1)
    s = Served(channel_timeout=1, cleanup_interval=1)
    try:
        with _connect(s.port) as conn:
            assert _get(conn, "/x")[0] == 200
            conn.settimeout(BOUND)
            assert conn.recv(1) == b""  # closed by the server, idle past its timeout
    finally:
        s.close()


def test_a_turn_asks_only_the_connections_that_moved(monkeypatch):
    """100 idle connections, 50 requests on one other: the idle ones are not asked `readable()` once
    (waitress's own loop asks every one of them on every turn)."""
    monkeypatch.setattr(inline_loop, "FULL_PASS_EVERY", 3600.0)
    s = Served(connection_limit=1000)
    asked: dict[int, int] = {}
    try:
        idle = [_connect(s.port) for _ in range(100)]
        busy = _connect(s.port)
        assert _get(busy, "/first")[0] == 200
        _until(lambda: _channels(s) == 101)
        for channel in [obj for obj in s.server._map.values() if hasattr(obj, "requests")]:
            original = channel.readable

            def counted(channel: Any = channel, original: Any = original) -> bool:
                asked[id(channel)] = asked.get(id(channel), 0) + 1
                return original()

            channel.readable = counted
        for i in range(50):
            assert _get(busy, f"/b{i}")[0] == 200
        # the busy one after each of its requests (the last ask may come after the client read its answer)
        assert len(asked) == 1 and sum(asked.values()) >= 49, asked
        for conn in [*idle, busy]:
            conn.close()
    finally:
        s.close()


def test_at_the_connection_limit_a_waiting_connection_is_accepted_once_one_closes(monkeypatch):
    monkeypatch.setattr(inline_loop, "FULL_PASS_EVERY", 3600.0)  # not by the once-a-second pass
    s = Served(connection_limit=12)  # the map holds the listener and its trigger too
    try:
        conns = [_connect(s.port) for _ in range(10)]
        for conn in conns:
            assert _get(conn, "/x")[0] == 200
        waiting = _connect(s.port)  # over the limit: connected by the kernel, not accepted
        waiting.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.3)
        assert _channels(s) == 10
        conns.pop().close()
        assert _read_answer(waiting, bytearray()) == (200, b"/late")
        for conn in [*conns, waiting]:
            conn.close()
    finally:
        s.close()


def test_the_helper_refuses_inline_with_a_latency():
    from swe_rl.fleet.fakes.simulated_fleet import main

    with pytest.raises(SystemExit) as raised:
        main(["--inline", "--latency-ms", "5"])
    assert raised.value.code == 2
