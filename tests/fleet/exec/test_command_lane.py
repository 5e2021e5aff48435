"""The command lane on real sockets (no Docker): output read to the end, a deadline's kill waited for, a
hung daemon ending every stream at once, many streams on its one thread (`command_lane.py`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from swe_rl.fleet.exec.command_lane import CommandLane

BOUND = 60.0  # far above any step here: only a hang reaches it


class _Stream:
    def __init__(
        self, timeout: float = BOUND, kill: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        self.sock, self.peer = socket.socketpair()
        self.deadline = time.monotonic() + timeout
        self.data = b""
        self.kills = 0
        self._kill = kill
        self.end: tuple[bool, BaseException | None] | None = None
        self.done = threading.Event()
        self.threads: set[int] = set()

    def received(self, chunk: bytes) -> None:
        self.threads.add(threading.get_ident())
        self.data += chunk

    def start_kill(self, on_killed: Callable[[], None]) -> None:
        self.kills += 1
        if self._kill is not None:
            self._kill(on_killed)

    def ended(self, timed_out: bool, error: BaseException | None) -> None:
        self.sock.close()
        self.end = (timed_out, error)
        self.done.set()


def test_streams_are_read_to_their_end_on_one_thread():
    lane = CommandLane()
    streams = [_Stream() for _ in range(50)]
    try:
        for s in streams:
            lane.watch(s)
        for i, s in enumerate(streams):
            s.peer.sendall(f"out-{i}".encode())
            s.peer.close()
        for i, s in enumerate(streams):
            assert s.done.wait(BOUND)
            assert (s.data, s.end, s.kills) == (f"out-{i}".encode(), (False, None), 0)
        assert len(set().union(*(s.threads for s in streams))) == 1
        assert lane.open_streams == 0
    finally:
        lane.close()


def test_a_timed_out_stream_ends_only_after_its_kill():
    """The deadline starts the kill; the stream's end (EOF from the killed command) waits for the kill to
    report done, and then says timed out."""
    killed: list[Callable[[], None]] = []
    kill_started = threading.Event()

    def kill(on_killed: Callable[[], None]) -> None:
        killed.append(on_killed)
        kill_started.set()

    s = _Stream(timeout=0.1, kill=kill)
    lane = CommandLane()
    try:
        lane.watch(s)
        assert kill_started.wait(BOUND)
        s.peer.sendall(b"last words")
        s.peer.close()  # the command died: EOF, but its kill has not reported yet
        assert not s.done.wait(1.0)
        killed[0]()  # from the kill's own thread, as docker_exec's does
        assert s.done.wait(BOUND)
        assert (s.data, s.end, s.kills) == (b"last words", (True, None), 1)
    finally:
        lane.close()


def test_a_hung_daemon_ends_every_open_stream_with_its_error():
    hung: list[BaseException] = []
    lane = CommandLane(abandon=lambda: hung[0] if hung else None)
    streams = [_Stream() for _ in range(3)]
    try:
        for s in streams:
            lane.watch(s)
        hung.append(RuntimeError("the daemon stopped answering"))
        for s in streams:
            assert s.done.wait(BOUND)
            assert s.end == (False, hung[0])
    finally:
        for s in streams:
            s.peer.close()
        lane.close()
