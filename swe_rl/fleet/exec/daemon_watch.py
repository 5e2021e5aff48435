"""Calls to a Docker daemon that stopped answering fail at once, not after the SDK's 600 s.

Why: the health thread sees a hung daemon within seconds (`health.py`), and the pool stops sending new
work, but a call already on the node (an exec, a create, a file copy) sat in the Docker SDK until its
600 s socket timeout: an exec with a 20 s timeout answered 504 after 50 s, and each such call kept a
server thread. Here every Docker call of a request runs on a worker thread while the request's thread
waits for it *or* for the watch to call the daemon hung (`MISSES` health pings in a row that got no
answer); then the request answers 503 at once (``env_error`` for the caller: the call's fate is unknown,
it may have run) and new calls are refused without touching the daemon until a ping is answered again.
The worker stays with the SDK until the daemon answers or the SDK gives up; the request does not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from swe_rl.fleet.exec.backend import Unavailable

T = TypeVar("T")

MISSES = 2
"""Pings in a row without an answer before the daemon counts as hung (one slow ping on a loaded
machine is not a hang: it would abandon every running command of a healthy node)."""
POLL = 0.25
"""Seconds between two looks at the watch while a call runs."""


class DaemonNotAnswering(Unavailable):
    """The node's Docker daemon stopped answering while (or before) this call ran: it may have run."""


class DaemonWatch:
    """Whether the daemon answers, from the health pings; runs calls so a hang cannot hold their caller."""

    def __init__(self, *, workers: int = 64, misses: int = MISSES) -> None:
        self.misses = misses
        self._missed = 0
        self._hung = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swe-docker")
        self._local = threading.local()

    @property
    def hung(self) -> bool:
        return self._hung.is_set()

    def saw_ping(self, answered: bool) -> None:
        """One health ping's outcome (the health thread's): a hang after `misses` unanswered in a row."""
        if answered:
            self._missed = 0
            self._hung.clear()
            return
        self._missed += 1
        if self._missed >= self.misses:
            self._hung.set()

    def refuse_if_hung(self) -> None:
        if self._hung.is_set():
            raise DaemonNotAnswering("the node's Docker daemon is not answering (its health pings time out)")

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()`, on a worker; `DaemonNotAnswering` as soon as the daemon counts as hung while it runs.

        A call made from a worker (one Docker call inside another) runs in place."""
        if getattr(self._local, "worker", False):
            return fn()
        self.refuse_if_hung()
        future: Future[T] = self._pool.submit(self._in_worker, fn)
        while True:
            try:
                return future.result(timeout=POLL)
            except FutureTimeout:
                if self._hung.is_set():
                    raise DaemonNotAnswering(
                        "the node's Docker daemon stopped answering during this call: it may have run"
                    ) from None

    def _in_worker(self, fn: Callable[[], T]) -> T:
        self._local.worker = True
        return fn()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
