"""The simulated nodes' event loop: one thread, requests served where they are read, one epoll.

Why the simulation has a loop of its own. A real node is a process on its own machine holding its own
clients' connections. The simulated fleet packs 25 nodes into one process on a shared CPU, so waitress's
loop there visits 25 nodes' connections (1,000-2,000 in the replica bench) on every turn, asking each
`readable()` and `writable()` and building a new `poll` over all of them, and hands every request to a
worker thread and back through its trigger pipe: a cost per call that grows with the lease count and
the number of nodes packed together, which a real node never pays, and which made the scale bench a
measure of the simulation's CPU (docs/fleet.md, "The bench"). Memory-backed commands are instant (the
simulated fleet uses this loop only when no latency is configured), so no worker thread is needed:

- `InlineDispatcher` takes waitress's tasks (a channel with a complete request) and runs them on the
  loop thread once the turn that read them is over (not inside the read: waitress holds the channel's
  request lock there);
- `run` keeps one epoll registration per socket and, each turn, asks again only the sockets that had an
  event, were just accepted (a channel adds itself to the map: the map's newest entries) or were
  served, and the listeners when the map's size changed (their connection limit); every socket once a
  second (the listeners' `readable()` runs waitress's maintenance: idle channels' close), dropping the
  ones that left the map. Nothing but this thread touches a channel, so no other change goes unseen.

The real exec server keeps waitress's loop and threads: its commands block on Docker.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import select
import threading
import time
from typing import Any

from waitress import wasyncore

logger = logging.getLogger("swe_exec_server")

FULL_PASS_EVERY = 1.0
"""Seconds between two passes over every socket of the map (new, closed, maintained ones)."""


class InlineDispatcher:
    """waitress's task dispatcher, with no threads: tasks wait in a queue the loop drains each turn."""

    def __init__(self) -> None:
        self.pending: collections.deque[Any] = collections.deque()

    def set_thread_count(self, count: int) -> None:  # waitress asks for its worker threads: there are none
        pass

    def add_task(self, task: Any) -> None:
        self.pending.append(task)

    def run_pending(self) -> list[Any]:
        """Serve every queued task (a channel's next request may queue it again); the channels served."""
        served = []
        while self.pending:
            task = self.pending.popleft()
            served.append(task)
            try:
                task.service()
            except BaseException:
                logger.exception("Exception when servicing %r", task)
        return served

    def shutdown(self, cancel_pending: bool = True, timeout: float = 5) -> bool:
        if cancel_pending:
            for task in self.pending:
                task.cancel()
        self.pending.clear()
        return True


def _quiet_on(listener: Any, loop_thread: threading.Thread) -> None:
    pull = listener.pull_trigger

    def pull_trigger() -> None:
        if threading.current_thread() is not loop_thread:
            pull()

    listener.pull_trigger = pull_trigger


def _flags(obj: Any) -> int:
    flags = 0
    if obj.readable():
        flags |= select.EPOLLIN | select.EPOLLPRI
    if obj.writable() and not obj.accepting:
        flags |= select.EPOLLOUT
    return flags


def run(server: Any, dispatcher: InlineDispatcher, stop: threading.Event) -> None:
    """The loop: until `stop` is set or the map is empty. Events go to waitress's own `readwrite`."""
    socket_map: dict[int, Any] = server._map if hasattr(server, "_map") else server.map
    listeners = {fd for fd, obj in socket_map.items() if getattr(obj, "accepting", False)}
    here = threading.current_thread()
    for fd in listeners:  # waitress pulls a listener's trigger after every request, to wake its loop from
        # a worker thread; here the loop served the request itself and asks the channel again anyway
        _quiet_on(socket_map[fd], here)
    epoll = select.epoll()
    registered: dict[int, tuple[Any, int]] = {}  # fd -> (the object registered, its flags)

    def ask(fd: int, obj: Any) -> None:
        """Register the socket's current wishes (nothing: unregistered, as `poll2` leaves it out)."""
        flags = _flags(obj)
        known = registered.get(fd)
        if known is not None and known[0] is obj and known[1] == flags:
            return
        if known is not None:
            ask_gone(fd)
        if flags:
            try:
                epoll.register(fd, flags)
            except OSError as e:
                if e.errno != errno.EBADF:
                    raise
                return
            registered[fd] = (obj, flags)

    def full_pass() -> None:
        for fd in [fd for fd in registered if fd not in socket_map]:
            ask_gone(fd)
        for fd, obj in list(socket_map.items()):
            ask(fd, obj)

    def ask_gone(fd: int) -> None:
        registered.pop(fd, None)
        try:
            epoll.unregister(fd)
        except OSError:  # closed since: the kernel dropped it with the descriptor
            pass

    try:
        full_pass()
        due, size = time.monotonic() + FULL_PASS_EVERY, len(socket_map)
        while socket_map and not stop.is_set():
            try:
                events = epoll.poll(max(0.0, due - time.monotonic()))
            except InterruptedError:
                events = []
            touched: dict[int, Any] = {}
            for fd, flags in events:
                obj = socket_map.get(fd)
                if obj is None:
                    ask_gone(fd)
                    continue
                before = len(socket_map)
                wasyncore.readwrite(obj, flags)
                touched[fd] = obj
                if fd in listeners and len(socket_map) > before:  # accepted: the map's newest entries
                    touched.update(itertools.islice(reversed(socket_map.items()), len(socket_map) - before))
            for channel in dispatcher.run_pending():
                if (served := getattr(channel, "_fileno", None)) is not None:
                    touched[served] = channel
            if time.monotonic() >= due:
                full_pass()
                due = time.monotonic() + FULL_PASS_EVERY
                size = len(socket_map)
                continue
            if len(socket_map) != size:  # a listener's answer depends on the map's size (its limit)
                size = len(socket_map)
                touched.update((fd, socket_map[fd]) for fd in listeners if fd in socket_map)
            for fd, obj in touched.items():
                if socket_map.get(fd) is obj:
                    ask(fd, obj)
                else:
                    ask_gone(fd)
    finally:
        epoll.close()
