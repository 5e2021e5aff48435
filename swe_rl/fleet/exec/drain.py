"""A graceful stop: SIGTERM drains the node instead of cutting its rollouts.

Why: a node update (re-running the set-up script, `systemctl restart`) sent SIGTERM, and the server
destroyed its warm containers and exited at once: every command running there was cut and its episode
lost. Draining, the node takes no new container (creates and warm targets answer 503 `draining`, so the
pool places them elsewhere; its /healthz says `draining` so the pool stops choosing it), lets the calls
in flight finish (up to `SWE_EXEC_DRAIN_SECONDS`), then exits. Leased containers stay: the next start
adopts them, and the pool holds its calls on them while the node restarts (pool/routing.py).

Once the drain ended (`close`), until the process is gone, every call is refused before it starts: 503
with `not_started`. That answer is the node's word that nothing ran, so the caller may send the call
again to the restarted node; a connection cut with no answer is not (the call may have run, and a
non-idempotent command would run twice).
"""

from __future__ import annotations

import threading
import time
from typing import Any

REFUSED_WHILE_DRAINING = frozenset({"/container/create", "/warm"})
"""Calls that would add work to a draining node; every other call (on a lease it holds) is served."""


class Drain:
    """Counts the calls in flight; once draining, waits for them to end."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.in_flight = 0
        self.draining = False
        self.closed = False
        """The drain ended: the node is about to exit and starts no call any more."""

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

    def close(self) -> None:
        """The drain is over (the calls ended, or its bound passed): refuse every call from now on."""
        with self._cond:
            self.draining = self.closed = True

    def refuses(self, path: str) -> bool:
        return self.closed or (self.draining and path in REFUSED_WHILE_DRAINING)

    def refusal(self) -> dict[str, Any]:
        """The 503 answer of a refused call: it did not start (`not_started`: safe to send again)."""
        if self.closed:
            error = "node stopping: the call was not started"
        else:
            error = "node draining: it takes no new container (stopping)"
        return {"error": error, "draining": True, "not_started": True}

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
