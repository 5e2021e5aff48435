"""When a request reached the exec server: waitress's parser stamps it, the app reads the stamp.

Why: a node's reported time (`x-swe-node-seconds`) starts when its server read the request, not when a
worker thread picked it up. Under a burst a request waits in waitress's queue for a free thread; that wait
is the node's, yet a stamp taken in the app counted it in the pool's overhead (pool handling minus the
node's time). What the node cannot see (its event loop reading the socket late) stays on the pool's side.
Waitress has no public hook for this: a channel class with our parser and task, set on each listener.
"""

from __future__ import annotations

import time
from typing import Any

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer

from swe_rl.fleet.exec.one_write import OneWriteTask

ARRIVAL_KEY = "swe.arrival"
"""WSGI environ key: `time.monotonic()` when the server read the request's first bytes (absent: unknown)."""


class _StampedParser(HTTPRequestParser):
    arrival: float | None = None

    def received(self, data: bytes) -> int:
        if self.arrival is None:
            self.arrival = time.monotonic()
        return int(super().received(data))


class StampedTask(OneWriteTask):  # a response's head and body in one write
    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        arrival = getattr(self.request, "arrival", None)
        if arrival is not None:
            environ.setdefault(ARRIVAL_KEY, arrival)
        return environ


class StampedChannel(HTTPChannel):
    parser_class = _StampedParser
    task_class = StampedTask


def stamp_arrivals(server: Any) -> Any:
    """Make each listener of a waitress server (one, or each of a multi-socket server's) stamp arrivals."""
    every = getattr(server, "map", None) or getattr(server, "_map", None) or {}  # multi-socket / one socket
    listeners = [s for s in list(every.values()) if isinstance(s, BaseWSGIServer)]
    for listener in listeners or [server]:
        listener.channel_class = StampedChannel
    return server


def arrival(environ: dict[str, Any]) -> float:
    """The request's arrival from the server's stamp, or now (a server that does not stamp, a test client)."""
    stamp = environ.get(ARRIVAL_KEY)
    return float(stamp) if isinstance(stamp, float) else time.monotonic()
