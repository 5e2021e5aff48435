"""One event loop reads the output of every running command: waiting for a command costs no thread.

Why: a command's output comes on a socket of its own (Docker's hijacked `POST /exec/{id}/start`
stream), and it was read by the request's thread with a blocking `recv` until the command ended, so a
node ran as many commands at once as it had server threads (128), each also holding a Docker watch
worker. Here one thread runs an asyncio loop that watches every stream's socket (`add_reader`), the
command's deadline (a timer) and the daemon watch (one periodic look for all streams): a command that
ends, times out (kill started, its answer waits for the kill) or is left on a hung daemon is *ended*,
and its `Stream.ended` tells whoever waits (a parked request, `parking.py`, or a thread in `wait`).

What a stream is (its frames, its kill) is the backend's (`docker_exec.ExecStream`); the lane only
reads, times and ends. The kill itself runs on a thread of its own (it calls Docker and sleeps between
passes), as before; only timed-out commands have one, and only while they are being killed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("swe_exec_server")

CHUNK = 65536
POLL = 0.25
"""Seconds between two looks at the daemon watch while streams are open (`daemon_watch.POLL`)."""
KILL_WAIT = 300.0
"""Upper bound on the wait for a timed-out command's kill before its answer leaves anyway (logged as an
error). Far above the kill's own time (one `docker exec` per pass, even on a loaded node)."""
DRAIN_AFTER_KILL = 2.0
"""Seconds the stream is still read after the kill finished (what the dead processes wrote last)."""


class Stream(Protocol):
    """One running command's output, as the lane drives it (all methods are called on the lane's thread,
    except `start_kill`'s `on_killed`, which may be called from any thread)."""

    sock: socket.socket
    deadline: float
    """`time.monotonic()` at which the command is killed."""

    def received(self, chunk: bytes) -> None: ...

    def start_kill(self, on_killed: Callable[[], None]) -> None:
        """The deadline passed: start killing the command (on another thread); `on_killed()` when done."""
        ...

    def ended(self, timed_out: bool, error: BaseException | None) -> None:
        """The stream is over: read to its end, or left (after a kill, or with `error` on a hung daemon);
        the stream closes its socket."""
        ...


class _Watch:
    __slots__ = ("stream", "timed_out", "killed", "eof", "timer")

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.timed_out = self.killed = self.eof = False
        self.timer: asyncio.TimerHandle | None = None


class CommandLane:
    """The loop's thread starts on the first stream and runs until `close()`."""

    def __init__(self, abandon: Callable[[], BaseException | None] = lambda: None) -> None:
        self._abandon = abandon
        """An error to end every open stream with (the daemon counts as hung), or None."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._open: dict[int, _Watch] = {}
        self._polling = False

    @property
    def open_streams(self) -> int:
        return len(self._open)

    def watch(self, stream: Stream) -> None:
        """Read `stream` until it ends (its `ended` is then called once, on the lane's thread)."""
        loop = self._running_loop()
        loop.call_soon_threadsafe(self._begin, stream)

    def close(self) -> None:
        with self._start_lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    # ------------------------------------------------------------------ the loop's thread

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()
                    loop.close()

                self._thread = threading.Thread(target=run, name="swe-command-lane", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _begin(self, stream: Stream) -> None:
        loop = asyncio.get_running_loop()
        w = _Watch(stream)
        fd = stream.sock.fileno()
        self._open[fd] = w
        stream.sock.setblocking(False)
        loop.add_reader(fd, self._readable, w)
        w.timer = loop.call_at(stream.deadline, self._expire, w)  # the loop's clock is time.monotonic
        if not self._polling:
            self._polling = True
            loop.call_later(POLL, self._poll)
        self._readable(w)  # what arrived before the reader was set

    def _readable(self, w: _Watch) -> None:
        while not w.eof:
            try:
                chunk = w.stream.sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._eof(w)
                return
            w.stream.received(chunk)

    def _expire(self, w: _Watch) -> None:
        w.timed_out = True
        loop = asyncio.get_running_loop()

        def on_killed() -> None:
            try:
                loop.call_soon_threadsafe(self._killed, w)
            except RuntimeError:  # the lane closed meanwhile (the server stops)
                pass

        w.stream.start_kill(on_killed)

    def _killed(self, w: _Watch) -> None:
        w.killed = True
        if w.eof:
            self._end(w)
        else:  # something outside the command may hold the stream open: read a moment, then leave it
            self._rearm(w, DRAIN_AFTER_KILL, self._end)

    def _eof(self, w: _Watch) -> None:
        asyncio.get_running_loop().remove_reader(w.stream.sock.fileno())
        w.eof = True
        if w.timed_out and not w.killed:  # the answer of a timed-out command waits for its kill
            self._rearm(w, KILL_WAIT, self._kill_overdue)
        else:
            self._end(w)

    def _kill_overdue(self, w: _Watch) -> None:
        log.error("kill of a timed-out command still running after %.0f s", KILL_WAIT)
        self._end(w)

    def _rearm(self, w: _Watch, delay: float, then: Callable[[_Watch], None]) -> None:
        if w.timer is not None:
            w.timer.cancel()
        w.timer = asyncio.get_running_loop().call_later(delay, then, w)

    def _end(self, w: _Watch, error: BaseException | None = None) -> None:
        fd = w.stream.sock.fileno()
        if self._open.get(fd) is not w:
            return
        del self._open[fd]
        if w.timer is not None:
            w.timer.cancel()
        if not w.eof:
            asyncio.get_running_loop().remove_reader(fd)
        try:
            w.stream.ended(w.timed_out, error)
        except Exception:
            log.exception("a command's end could not be delivered")

    def _poll(self) -> None:
        if not self._open:
            self._polling = False
            return
        error = self._abandon()
        if error is not None:
            for w in list(self._open.values()):
                self._end(w, error)
        asyncio.get_running_loop().call_later(POLL, self._poll)
