"""The exec server's event loop: each turn asks only the channels that may have changed, over one epoll.

Why: waitress's loop (`wasyncore.poll2`) asks every connection of the process `readable()` and
`writable()` on every turn and builds a new `poll` over all of them. A node's clients keep idle
connections open for reuse, and the simulated nodes' processes held 1,300-2,300 of them in the scale
bench: measured on a waitress server alone, a turn over 2,000 idle connections cost 1.08 ms of CPU
(0.70 of it the questions), paid again for every request the process served (docs/fleet.md, "The bench").

What changes, and why it answers the same: an *idle* channel (no request read and unanswered, no task
handed to a worker, no bytes to send, not closing) answers readable and not writable, and only the loop
can change that: its own read (an event seen here), its maintenance (the listener's `readable()`, which
marks old idle channels `will_close`). A worker thread touches a channel only while a task of it is
queued or running (`service`, which ends by pulling the trigger), and a parked request (`parking.py`)
keeps the channel's request list non-empty until its resumed task answered. So each turn asks:
- the listeners when the map's size changed (their connection limit) or a maintenance is due (their
  `readable()` runs it); the triggers (always readable, never writable) at the full passes; any other
  object every turn;
- every channel that was busy when last asked (busy: a task handed and not over, counted here around
  `add_task` and `service`; a request unanswered; bytes to send; `will_close` / `close_when_flushed`);
- every channel that had an event or was accepted since the last turn;
- every channel, on a turn whose maintenance ran and at least every `full_pass_seconds` (a safety net for
  a change this reasoning missed: it would wait for that pass, not forever).
The answers go to one persistent epoll registration, changed only when a channel's answer changes (a
channel that wants nothing is unregistered, as poll2 leaves it out: no hang-up reported for it either).
Events are handled by waitress's own `readwrite`. Channels join and leave through the listener's
`active_channels` (waitress's own hooks, `add_channel` / `del_channel`), which is replaced here by a dict
that tells the loop; a closed channel is unregistered before its socket closes.

Linux only (epoll); elsewhere the server keeps waitress's loop. Used by the exec server (`app.py`) and the
simulated nodes (`fakes/simulated_fleet.py`).
"""

from __future__ import annotations

import logging
import math
import select
import threading
import time
from typing import Any

from waitress import trigger, wasyncore
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, MultiSocketServer

log = logging.getLogger("swe_exec_server")

FULL_PASS_SECONDS = 1.0
"""At least this often every channel is asked (at 2,000 idle channels ~0.7 ms of CPU a second)."""
_IN = select.POLLIN | select.POLLPRI
_OUT = select.POLLOUT
_TASKS = "_swe_loop_tasks"
"""Channel attribute: its tasks handed to a worker and not over (under `EventLoop._lock`)."""


class _Channels(dict[int, Any]):
    """A listener's `active_channels` (fd -> channel) that tells the loop of every channel added or removed
    (waitress's `HTTPChannel.add_channel` / `del_channel` write it; a removal comes before the close)."""

    def __init__(self, loop: EventLoop, channels: dict[int, Any]) -> None:
        super().__init__(channels)
        self._loop = loop

    def __setitem__(self, fd: int, channel: Any) -> None:
        super().__setitem__(fd, channel)
        self._loop._added(channel)

    def __delitem__(self, fd: int) -> None:
        channel = self.get(fd)
        super().__delitem__(fd)
        self._loop._removed(fd, channel)


class EventLoop:
    """Runs a waitress server's map (one listener or a multi-socket server's many) as described above."""

    def __init__(self, server: Any, *, full_pass_seconds: float = FULL_PASS_SECONDS) -> None:
        self.server = server
        self.map: dict[int, Any] = server.map if isinstance(server, MultiSocketServer) else server._map
        self.timeout = float(server.adj.asyncore_loop_timeout)
        self.full_pass_seconds = full_pass_seconds
        self.listeners = [o for o in self.map.values() if isinstance(o, BaseWSGIServer)]
        self.asks = 0
        """Objects asked `readable()` / `writable()` so far (what a test counts)."""
        self._epoll = select.epoll()
        self._masks: dict[int, int] = {}
        """fd -> the events it is registered for (absent: not registered)."""
        self._listeners: list[Any] = []
        self._fixed: list[Any] = []
        """The triggers: readable, never writable, asked at the full passes only."""
        self._always: list[Any] = []
        """Objects of no kind known here: asked every turn."""
        self._size = -1
        self._cleanup_due = 0.0
        self._busy: set[Any] = set()
        self._touched: set[Any] = set()
        self._next_full = 0.0  # the first turn asks everything
        self._lock = threading.Lock()
        self._stopping = False
        for listener in self.listeners:
            listener.active_channels = _Channels(self, listener.active_channels)
            listener.add_task = self._counting(listener.add_task)
        for channel in list(self.map.values()):
            if isinstance(channel, HTTPChannel):
                self._added(channel)

    # -- what the channels tell the loop (any thread) --

    def _added(self, channel: Any) -> None:
        """A channel joined (accepted, on the loop's thread): asked next turn; its tasks counted."""
        if "service" not in vars(channel):
            channel.service = self._counted_service(channel, channel.service)
        self._touched.add(channel)

    def _removed(self, fd: int, channel: Any) -> None:
        """A channel left (closed, on the loop's thread or a worker's): unregistered before its socket
        closes, so its fd number, once reused, is not mistaken for it."""
        self._unregister(fd)
        self._busy.discard(channel)
        self._touched.discard(channel)

    def _counting(self, add_task: Any) -> Any:
        def add_task_counted(channel: Any) -> None:
            with self._lock:
                setattr(channel, _TASKS, getattr(channel, _TASKS, 0) + 1)
            add_task(channel)

        return add_task_counted

    def _counted_service(self, channel: Any, service: Any) -> Any:
        def service_counted() -> None:
            try:
                service()
            finally:  # after waitress's own pull of the trigger: the task's last change to the channel
                with self._lock:
                    setattr(channel, _TASKS, getattr(channel, _TASKS, 0) - 1)

        return service_counted

    # -- the loop --

    def run(self) -> None:
        """Serve until the map empties, or SystemExit / KeyboardInterrupt (then as waitress's `run`)."""
        try:
            while self.map and not self._stopping:
                self.turn()
        except (SystemExit, KeyboardInterrupt):
            if isinstance(self.server, MultiSocketServer):
                self.server.close()
            else:
                self.server.task_dispatcher.shutdown()
        finally:
            if self._stopping:
                wasyncore.close_all(self.map, ignore_all=True)
                self.server.task_dispatcher.shutdown()
            self._epoll.close()

    def stop(self) -> None:
        """From any thread: end `run` after its current turn, every socket of the map closed and the
        worker threads stopped."""
        self._stopping = True
        if self.listeners:
            self.listeners[0].pull_trigger()

    def turn(self, timeout: float | None = None) -> None:
        """Ask what may have changed, wait for events (up to `timeout`, default waitress's loop
        timeout), handle them."""
        now = time.monotonic()
        full = now >= self._next_full
        if full:
            self._reconcile()
        maintained = False
        size = len(self.map)
        if full or size != self._size or time.time() >= self._cleanup_due:
            # A listener's answer changes only with the map's size (its connection limit) or when its
            # maintenance is due (its `readable()` runs it); a trigger's never (readable, not writable).
            for listener in self._listeners:
                cleanup = listener.next_channel_cleanup
                self._ask(listener)
                maintained |= listener.next_channel_cleanup != cleanup
            self._size = size
            self._cleanup_due = min((o.next_channel_cleanup for o in self._listeners), default=math.inf)
        for obj in self._fixed if full else ():
            self._ask(obj)
        for obj in self._always:
            self._ask(obj)
        touched, self._touched = self._touched, set()
        if full or maintained:
            self._next_full = now + self.full_pass_seconds
            asked = [o for o in list(self.map.values()) if isinstance(o, HTTPChannel)]
        else:
            asked = list(self._busy | touched)
        for channel in asked:
            self._ask(channel)
        events = self._epoll.poll(self.timeout if timeout is None else timeout)
        for fd, flags in events:
            obj = self.map.get(fd)
            if obj is None:  # closed in a way that did not say so: nothing to tell
                self._unregister(fd)
                continue
            wasyncore.readwrite(obj, flags)
            if isinstance(obj, HTTPChannel):
                self._touched.add(obj)

    def _ask(self, obj: Any) -> None:
        fd = obj._fileno
        if fd is None or not self._holds(fd, obj):
            return  # closed since
        self.asks += 1
        if isinstance(obj, HTTPChannel):
            # Whether it is idle is read first: once no task is handed, no other thread changes it, so the
            # answers below are still its answers when the loop next skips it.
            if _idle(obj):
                self._busy.discard(obj)
            else:
                self._busy.add(obj)
        mask = 0
        if obj.readable():
            mask |= _IN
        if obj.writable() and not obj.accepting:  # as poll2: a listener is never asked to write
            mask |= _OUT
        self._register(fd, mask)

    def _holds(self, fd: int, obj: Any) -> bool:
        return self.map.get(fd) is obj

    def _register(self, fd: int, mask: int) -> None:
        old = self._masks.get(fd)
        if old == mask or (old is None and not mask):
            return
        if not mask:
            self._unregister(fd)
            return
        try:
            if old is None:
                self._epoll.register(fd, mask)
            else:
                self._epoll.modify(fd, mask)
        except FileExistsError:
            self._epoll.modify(fd, mask)
        except FileNotFoundError:
            self._epoll.register(fd, mask)
        except OSError as exc:  # closed by a worker just now: its removal unregistered it
            log.debug("event loop: fd %d not registered: %s", fd, exc)
            return
        self._masks[fd] = mask

    def _unregister(self, fd: int) -> None:
        self._masks.pop(fd, None)
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):  # never registered, already closed, or the loop is over
            pass

    def _reconcile(self) -> None:
        """The objects that are not channels, from the map; registrations of what left it, dropped."""
        others = [o for o in list(self.map.values()) if not isinstance(o, HTTPChannel)]
        self._listeners = [o for o in others if isinstance(o, BaseWSGIServer)]
        self._fixed = [o for o in others if isinstance(o, trigger.trigger)]
        self._always = [o for o in others if o not in self._listeners and o not in self._fixed]
        for fd in [fd for fd in list(self._masks) if fd not in self.map]:
            self._unregister(fd)
        self._busy = {c for c in list(self._busy) if self.map.get(c._fileno) is c}


def _idle(channel: Any) -> bool:
    """No task handed (read first), no request unanswered, nothing to send, not closing."""
    return not (
        getattr(channel, _TASKS, 0)
        or channel.requests
        or channel.total_outbufs_len
        or channel.will_close
        or channel.close_when_flushed
    )


def serve_with_event_loop(server: Any, *, full_pass_seconds: float = FULL_PASS_SECONDS) -> EventLoop | None:
    """Make `server.run()` run this loop (install it after the other hooks on the server: `add_task` is
    wrapped as found). None where epoll is missing: the server keeps waitress's loop."""
    if not hasattr(select, "epoll"):
        return None
    loop = EventLoop(server, full_pass_seconds=full_pass_seconds)
    server.run = loop.run
    return loop
