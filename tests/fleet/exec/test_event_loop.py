"""The exec server's event loop (`event_loop.py`) on a real waitress server over loopback sockets (no Docker).

It asks only the channels that may have changed; everything waitress promises must still hold: idle
kept-alive connections answered when they speak again, pipelined requests answered in order, a client
that half-closes answered, a slow reader's large answer delivered whole, idle channels closed by the
maintenance, closed channels dropped (no descriptor left), a parked request's resumed answer written.
The loop's safety-net pass is set to an hour here, so what is checked is the targeted path itself.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import waitress.server
from waitress import wasyncore
from waitress.channel import HTTPChannel

from swe_rl.fleet.exec.event_loop import EventLoop, serve_with_event_loop
from swe_rl.fleet.exec.parking import PARK_KEY, Slot, park_requests

BOUND = 60.0  # far above any step here: only a hang reaches it
HOUR = 3600.0
BIG = 8 << 20


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    if path == "/big":
        body = bytes(range(256)) * (BIG // 256)
    elif path.startswith("/slow/"):
        time.sleep(float(path.rsplit("/", 1)[1]))
        body = path.encode()
    else:
        body = (path + " " + environ["wsgi.input"].read().decode()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, f"not within {BOUND}s: {what}"
        time.sleep(0.02)


class Served:
    def __init__(self, app: Any, **adjustments: Any) -> None:
        self.server = waitress.server.create_server(app, host="127.0.0.1", port=0, **adjustments)
        self.port = int(self.server.effective_port)
        self.loop = serve_with_event_loop(self.server, full_pass_seconds=HOUR)
        assert self.loop is not None
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        assert self.loop is not None
        self.loop.stop()
        self.thread.join(BOUND)
        assert not self.thread.is_alive()


@pytest.fixture
def served() -> Iterator[Callable[..., Served]]:
    made: list[Served] = []

    def make(app: Any = _app, **adjustments: Any) -> Served:
        made.append(Served(app, **{"threads": 4, "connection_limit": 1000, **adjustments}))
        return made[-1]

    yield make
    for s in made:
        s.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def _request(path: str, body: bytes = b"", extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


class Reader:
    """Reads Content-Length framed answers off one kept-alive connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def answer(self) -> tuple[bytes, bytes]:
        """One whole answer; nothing is taken off the buffer until it is whole (on a non-blocking socket a
        read may stop between the head and the body: the next call starts from the head again)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        length = next(
            int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
        )
        while len(rest) < length:
            self._fill()
            head, rest = self.buf.split(b"\r\n\r\n", 1)
        self.buf = rest[length:]
        return head, rest[:length]


def _call(reader: Reader, path: str, body: bytes = b"") -> bytes:
    reader.sock.sendall(_request(path, body))
    head, answer = reader.answer()
    assert head.startswith(b"HTTP/1.1 200"), head
    return answer


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_idle_kept_alive_connections_and_busy_ones_all_answered(served):
    s = served()
    idle = [Reader(_connect(s.port)) for _ in range(150)]
    for n, r in enumerate(idle):
        assert _call(r, f"/first/{n}", b"x") == f"/first/{n} x".encode()
    busy = [Reader(_connect(s.port)) for _ in range(4)]
    errors: list[BaseException] = []

    def work(r: Reader, k: int) -> None:
        try:
            for i in range(40):
                assert _call(r, f"/busy/{k}/{i}", b"b") == f"/busy/{k}/{i} b".encode()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(r, k)) for k, r in enumerate(busy)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(BOUND)
    assert not errors
    for n, r in enumerate(idle):  # every idle one, its turn skipped since, speaks again
        assert _call(r, f"/again/{n}") == f"/again/{n} ".encode()
    for r in idle + busy:
        r.sock.close()


def test_pipelined_requests_answered_in_order(served):
    s = served()
    r = Reader(_connect(s.port))
    r.sock.sendall(_request("/slow/0.2") + _request("/two", b"2") + _request("/three", b"3"))
    assert [r.answer()[1] for _ in range(3)] == [b"/slow/0.2", b"/two 2", b"/three 3"]
    r.sock.close()


def test_a_client_that_half_closes_gets_its_answer(served):
    s = served()
    sock = _connect(s.port)
    sock.sendall(_request("/slow/0.3"))
    sock.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"/slow/0.3")


def test_a_slow_reader_gets_a_large_answer_whole_while_others_are_served(served):
    s = served()
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(BOUND)
    slow.connect(("127.0.0.1", s.port))
    slow.sendall(_request("/big"))
    _until(
        lambda: any(getattr(c, "total_outbufs_len", 0) for c in list(s.server._map.values())), "bytes pending"
    )
    other = Reader(_connect(s.port))
    assert _call(other, "/meanwhile", b"m") == b"/meanwhile m"  # served while the big answer waits
    _, body = Reader(slow).answer()
    assert body == bytes(range(256)) * (BIG // 256)
    slow.close()
    other.sock.close()


def test_expect_continue_behind_a_request_in_service(served):
    s = served()
    r = Reader(_connect(s.port))
    r.sock.sendall(_request("/slow/0.2"))
    r.sock.sendall(b"POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert r.answer()[1] == b"/slow/0.2"
    while b"100 Continue\r\n\r\n" not in r.buf:
        r._fill()
    r.buf = r.buf.split(b"100 Continue\r\n\r\n", 1)[1]
    r.sock.sendall(b"late")
    assert r.answer()[1] == b"/later late"
    r.sock.close()


def test_idle_channels_closed_by_the_maintenance(served):
    s = served(channel_timeout=1, cleanup_interval=1)
    r = Reader(_connect(s.port))
    assert _call(r, "/once") == b"/once "
    r.sock.settimeout(BOUND)
    assert r.sock.recv(1) == b""  # closed by the server while idle (the safety-net pass is an hour away)
    r.sock.close()


def test_channels_closed_by_the_peer_leave_the_registration(served):
    s = served()
    loop: EventLoop = s.loop  # type: ignore[assignment]
    _call(Reader(warm := _connect(s.port)), "/warm")
    warm.close()
    _until(lambda: len(s.server._map) == 2, "the warm-up channel dropped")  # the listener, its trigger
    before, registered = _open_fds(), len(loop._masks)
    readers = [Reader(_connect(s.port)) for _ in range(60)]
    for n, r in enumerate(readers):
        assert _call(r, f"/n/{n}") == f"/n/{n} ".encode()
    _until(lambda: len(loop._masks) == registered + 60, "every open channel registered")
    for r in readers:
        r.sock.close()
    _until(lambda: len(s.server._map) == 2, "every closed channel dropped from the map")
    _until(lambda: len(loop._masks) == registered, "every closed channel unregistered")
    _until(lambda: _open_fds() == before, "no descriptor left open")
    assert not loop._busy


class _Counted(HTTPChannel):
    asked = 0

    def readable(self) -> bool:
        type(self).asked += 1
        return bool(super().readable())


def test_waitress_asks_every_channel_each_turn_this_loop_only_the_changed_ones():
    server = waitress.server.create_server(_app, host="127.0.0.1", port=0, threads=1, connection_limit=1000)
    server.channel_class = _Counted
    loop = EventLoop(server, full_pass_seconds=HOUR)
    socks = [_connect(int(server.effective_port)) for _ in range(100)]
    try:
        _until_turned(loop, lambda: len(server._map) == 102, "100 connections accepted")
        for _ in range(3):  # settle: the new channels asked once, found idle
            loop.turn(0)
        _Counted.asked = 0
        wasyncore.poll2(0, server._map)  # waitress's own turn
        assert _Counted.asked == 100
        _Counted.asked, asks = 0, loop.asks
        for _ in range(5):
            loop.turn(0)
        assert _Counted.asked == 0  # idle channels are not asked
        assert loop.asks == asks  # nor the listener (its map's size unchanged), nor the trigger
        socks[7].sendall(_request("/one", b"1"))
        reader = Reader(socks[7])
        reader.sock.setblocking(False)
        got: list[bytes] = []

        def answered() -> bool:
            try:
                got.append(reader.answer()[1])
            except (BlockingIOError, EOFError):
                return False
            return True

        _until_turned(loop, answered, "the one request answered")
        assert got == [b"/one 1"]
        for _ in range(5):
            loop.turn(0)
        assert 1 <= _Counted.asked <= 10  # that channel, a turn or a few: never the 99 others
    finally:
        for sock in socks:
            sock.close()
        wasyncore.close_all(server._map)
        server.task_dispatcher.shutdown()


def _until_turned(loop: EventLoop, check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, f"not within {BOUND}s: {what}"
        loop.turn(0.02)


def test_a_parked_request_resumed_gets_its_answer_written(served):
    waiters: dict[int, Any] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        slot: Slot | None = environ.get(PARK_KEY)
        path = environ["PATH_INFO"]
        if path.startswith("/wait/"):
            assert slot is not None
            if not slot.resumed:
                n = int(path.rsplit("/", 1)[1])
                slot.park(n, lambda callback, n=n: waiters.__setitem__(n, callback))
            body = f"waited {slot.state}".encode()
        else:
            body = b"free"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    s = served(app, threads=1)
    park_requests(s.server)
    readers = [Reader(_connect(s.port)) for _ in range(3)]
    for n, r in enumerate(readers):
        r.sock.sendall(_request(f"/wait/{n}"))
    _until(lambda: len(waiters) == 3, "three calls parked")
    free = Reader(_connect(s.port))
    assert _call(free, "/free") == b"free"  # the one worker thread is free
    for n in (2, 0, 1):
        waiters[n]()  # the command ended: the slot hands the connection back to a worker
        assert readers[n].answer()[1] == f"waited {n}".encode()
    for r in readers + [free]:
        r.sock.close()


def test_past_the_connection_limit_a_connection_waits_until_one_closes(served):
    s = served(connection_limit=4)  # the listener and its trigger count: two channels at most
    first, second = Reader(_connect(s.port)), Reader(_connect(s.port))
    assert _call(first, "/a") == b"/a " and _call(second, "/b") == b"/b "
    third = Reader(_connect(s.port))  # in the kernel's backlog: not accepted while at the limit
    third.sock.sendall(_request("/c"))
    third.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        third.answer()
    third.sock.settimeout(BOUND)
    first.sock.close()  # the map shrinks: the listener is asked again, accepts, the call is answered
    assert third.answer()[1] == b"/c "
    second.sock.close()
    third.sock.close()


def test_the_readers_answer_survives_a_read_that_stops_between_head_and_body():
    """(The tests' own reader: a non-blocking read that stopped after the head lost it, and the wait for
    the answer then ran to its bound on a loaded machine.)"""
    mine, peer = socket.socketpair()
    try:
        mine.setblocking(False)
        reader = Reader(mine)
        peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n")
        with pytest.raises(BlockingIOError):
            reader.answer()
        peer.sendall(b"abc")
        assert reader.answer() == (b"HTTP/1.1 200 OK\r\nContent-Length: 3", b"abc")
    finally:
        mine.close()
        peer.close()
