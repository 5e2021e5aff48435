"""`/healthz` on threads of its own: a health check never waits behind the node's commands.

Why: waitress serves every request on one pool of worker threads, and a routed exec held its thread
until the command ended. With every thread on a long command (measured: 128 of them), the pool's health
check waited 11.6 s for a thread, over the pool's 5 s health timeout, and a busy node was marked down.
Here each listener hands a channel whose next request is `GET /healthz` to a small dispatcher of its own
(the answer is a snapshot, `health.py`: it never blocks), and every other request to the usual threads.
(A call waiting for its command no longer holds a thread, `parking.py`; the lane still keeps a check
from queueing behind a burst of calls.) Waitress has no public hook for this: the listener's `add_task` is replaced, as `arrival.py` replaces
its channel class.
"""

from __future__ import annotations

from typing import Any

from waitress.server import BaseWSGIServer
from waitress.task import ThreadedTaskDispatcher

HEALTH_PATH = "/healthz"
HEALTH_THREADS = 2


def _is_health(channel: Any) -> bool:
    requests = getattr(channel, "requests", None) or []
    if not requests:
        return False
    request = requests[0]
    return bool(getattr(request, "command", "") == "GET" and getattr(request, "path", "") == HEALTH_PATH)


def health_lane(server: Any, threads: int = HEALTH_THREADS) -> ThreadedTaskDispatcher:
    """Route each listener's `GET /healthz` to a dispatcher of `threads` threads; returns it (shut it
    down with the server: `dispatcher.shutdown()`)."""
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(threads)
    every = getattr(server, "map", None) or getattr(server, "_map", None) or {}
    listeners = [s for s in list(every.values()) if isinstance(s, BaseWSGIServer)] or [server]
    for listener in listeners:
        usual = listener.add_task

        def add_task(channel: Any, usual: Any = usual) -> None:
            (dispatcher.add_task if _is_health(channel) else usual)(channel)

        listener.add_task = add_task
    return dispatcher
