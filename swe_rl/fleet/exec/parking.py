"""Parked requests: a call waiting for its command holds no server thread.

Why: waitress serves a request on one of its worker threads from the first byte of the app to the last
of the answer, so a call that waits for a command (an exec, an evaluation) held a thread for the
command's whole run: a node ran at most as many commands at once as it had threads (128), and more
threads cost memory and scheduling for nothing but waiting. Here the app *parks* such a request: it
starts the command, leaves its continuation in the request's `Slot` and raises `Parked`; the thread goes
back to waitress with the request still first on its connection (nothing answered, nothing more read
from it). When the command ends (the command lane says so, `command_lane.py`), the slot hands the
connection to waitress again, and a worker thread runs the app once more for the same request: the app
finds the slot's continuation and answers (or parks again for the call's next command).

The app sees one `Slot` per request in its environ (`PARK_KEY`); a server that cannot park (a test
client, another WSGI server) gives none, and the app then waits on its thread as before. Waitress has
no public hook for this: the channel's `service` and the task's environment are extended, as
`arrival.py` extends them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from waitress.server import BaseWSGIServer

from swe_rl.fleet.exec.arrival import StampedChannel, StampedTask

log = logging.getLogger("swe_exec_server")

PARK_KEY = "swe.park"
"""WSGI environ key: the request's `Slot` (absent: this server cannot park requests)."""
_SLOT_ATTR = "swe_slot"


class Parked(BaseException):
    """Raised by the app once it parked the request: not an error (a BaseException, so no handler of
    the app answers it; the app's teardown sees it, and the channel below catches it)."""


class Slot:
    """Where a parked request's continuation waits, and the resume once both the command ended and the
    parking thread left."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self.state: Any = None
        """The app's continuation (None until the request parked once)."""
        self.kept: dict[str, Any] = {}
        """What the app keeps of the parking call for the resumed one (its credential, its count)."""
        self._lock = threading.Lock()
        self._left = self._ready = False

    @property
    def resumed(self) -> bool:
        return self.state is not None

    def park(self, state: Any, on_end: Callable[[Callable[[], None]], None]) -> NoReturn:
        """Leave `state` here and give the thread back; `on_end(callback)` must call `callback()` once the
        awaited command ended (from any thread; at once if it already has)."""
        with self._lock:
            self.state = state
            self._left = self._ready = False
        on_end(self._on_ready)
        raise Parked

    def _on_ready(self) -> None:
        with self._lock:
            self._ready = True
            go = self._left
        if go:
            self._resume()

    def thread_left(self) -> None:
        with self._lock:
            self._left = True
            go = self._ready
        if go:
            self._resume()

    def _resume(self) -> None:
        self._channel.server.add_task(self._channel)  # waitress's queue (thread-safe): a worker runs it


class ParkingTask(StampedTask):
    def get_environment(self) -> dict[str, Any]:
        environ = super().get_environment()
        if not getattr(self.request, "error", None):
            slot = getattr(self.request, _SLOT_ATTR, None)
            if slot is None:
                slot = Slot(self.channel)
                setattr(self.request, _SLOT_ATTR, slot)
            environ[PARK_KEY] = slot
        return environ


class ParkingChannel(StampedChannel):
    task_class = ParkingTask

    def service(self) -> None:
        request = self.requests[0]
        slot: Slot | None = getattr(request, _SLOT_ATTR, None)
        if slot is not None and slot.resumed and not self.connected and self._end_unanswered(slot):
            return
        try:
            super().service()
        except Parked:
            # Nothing was written and the request stays first: the connection reads nothing more, and
            # its channel is not idle for waitress's cleanup, until the resumed call answered.
            slot = getattr(request, _SLOT_ATTR)
            slot.thread_left()

    def _end_unanswered(self, slot: Slot) -> bool:
        """The connection closed while the request was parked: waitress would not call the app again, so
        the app runs here to end its call (release what it holds); its answer has nowhere to go.
        True when it parked again."""
        task = self.task_class(self, self.requests[0])
        try:
            task.service()
        except Parked:
            slot.thread_left()
            return True
        except Exception:  # noqa: BLE001 - the write to the closed connection fails, as expected
            log.debug("a parked call's client left before its answer")
        return False


def park_requests(server: Any) -> Any:
    """Make each listener of a waitress server (one, or each of a multi-socket server's) offer a `Slot`
    to the app (arrivals stamped too: `ParkingChannel` is a `StampedChannel`)."""
    every = getattr(server, "map", None) or getattr(server, "_map", None) or {}
    listeners = [s for s in list(every.values()) if isinstance(s, BaseWSGIServer)]
    for listener in listeners or [server]:
        listener.channel_class = ParkingChannel
    return server
