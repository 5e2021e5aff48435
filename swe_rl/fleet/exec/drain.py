"""A graceful stop: SIGTERM drains the node instead of cutting its rollouts.

Why: a node update (re-running the set-up script, `systemctl restart`) sent SIGTERM, and the server
destroyed its warm containers and exited at once: every command running there was cut and its episode
lost. Draining, the node takes no new container (creates and warm targets answer 503 `draining`, so the
pool places them elsewhere; its /healthz says `draining` so the pool stops choosing it), lets the calls
in flight finish (up to `SWE_EXEC_DRAIN_SECONDS`), then exits. Leased containers stay: the next start
adopts them, and the pool holds its calls on them while the node restarts (pool/routing.py).
"""

from __future__ import annotations

import threading
import time

REFUSED_WHILE_DRAINING = frozenset({"/container/create", "/warm"})
"""Calls that would add work to a draining node; every other call (on a lease it holds) is served."""


class Drain:
    """Counts the calls in flight; once draining, waits for them to end."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.in_flight = 0
        self.draining = False

    def enter(self) -> None:
        with self._cond:
            self.in_flight += 1

    def leave(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def begin(self) -> None:
        with self._cond:
            self.draining = True

    def refuses(self, path: str) -> bool:
        return self.draining and path in REFUSED_WHILE_DRAINING

    def wait(self, seconds: float) -> int:
        """Wait until no call is in flight or `seconds` passed; the calls still running then."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while self.in_flight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self.in_flight
