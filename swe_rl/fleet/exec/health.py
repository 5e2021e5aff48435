"""The node's health, taken by a thread of its own and answered without waiting for anything.

Why: `/healthz` is how the pool tells a live node from a dead one, within its health timeout (5 s). It
used to ask the backend on the request's thread: a hung Docker daemon held the answer for the SDK's
600 s timeout (the pool saw a "slow" node and kept routing to it), and every registry lock a Docker call
held delayed it too. Here one thread takes a snapshot every `interval` (the backend's own short-timeout
ping) and `/healthz` answers the last one at once, with the node's figures taken on the spot. A snapshot older than `stale_after` (the
thread stuck on a lock or a call) is itself the answer: not ok, with its age. So a hung daemon makes the
node unhealthy within `stale_after` whatever it hangs on, and nothing a command does delays the answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("swe_exec_server")

INTERVAL = 1.0
"""Seconds between two snapshots."""
STALE_AFTER = 4.0
"""A snapshot older than this is not trusted (under the pool's 5 s health timeout)."""


class HealthMonitor:
    """The last health snapshot of this node, refreshed by a background thread.

    ``take`` builds a snapshot: ``(ok, figures)``; it may block (the backend's ping has its own short
    timeout, a registry lock may be held). Before `start` (an app under a test client) each `current`
    takes one on the caller's thread, as the endpoint always did."""

    def __init__(
        self,
        take: Callable[[], tuple[bool, dict[str, Any]]],
        *,
        interval: float = INTERVAL,
        stale_after: float = STALE_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._take, self.interval, self.stale_after, self._clock = take, interval, stale_after, clock
        self._lock = threading.Lock()
        self._last: tuple[float, bool, dict[str, Any]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self.refresh()  # the first answer is a real one
        self._thread = threading.Thread(target=self._run, name="swe-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def refresh(self) -> None:
        """Take one snapshot now (the thread's step; a failure is a not-ok snapshot with its reason)."""
        try:
            ok, figures = self._take()
        except Exception as exc:  # noqa: BLE001 - a failing check is an unhealthy node, not a dead thread
            log.warning("health check failed: %s: %s", type(exc).__name__, exc)
            ok, figures = False, {"error": f"health check failed: {type(exc).__name__}: {exc}"}
        with self._lock:
            self._last = (self._clock(), ok, figures)

    def current(self) -> tuple[bool, dict[str, Any]]:
        """The last snapshot: ok and its figures, plus ``health_age`` (seconds); not ok when stale."""
        if self._thread is None:
            self.refresh()
        with self._lock:
            last = self._last
        assert last is not None
        taken, ok, figures = last
        age = max(0.0, self._clock() - taken)
        answer = {**figures, "health_age": round(age, 3)}
        if age > self.stale_after:
            answer["error"] = (
                f"the node's health was last taken {age:.1f}s ago: its check is stuck "
                "(a hung container daemon or a held lock)"
            )
            return False, answer
        return ok, answer

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()
