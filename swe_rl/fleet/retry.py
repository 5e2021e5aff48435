"""One retry loop for every HTTP client of swe-rl (fleet client, SGLang token policy, PRM judge).

Each client keeps its own idea of what may be repeated; this module only repeats:

    result = await retry_async(attempt, RetryPolicy(retries=3, backoff=1.0, backoff_max=10.0),
                               retryable=lambda exc: isinstance(exc, httpx.TransportError))

An attempt either returns, raises `TryAgain(error, retry_after=...)` (worth repeating; `error` is
raised once attempts or time run out), or raises anything else, which `retryable` may accept too
(raised as it is when giving up); every other exception ends the loop at once. Delays grow
geometrically (`backoff * factor**n`, at most `backoff_max`), drawn from [d/2, d] with `jitter`;
a server's Retry-After replaces the computed delay. With a `deadline` the loop stops when time runs
out (the last sleep is cut to fit); with `retries` after that many retries; whichever comes first.
This module lives in the fleet package (the fleet imports nothing above it); the others import it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

__all__ = ["Retry", "RetryPolicy", "TryAgain", "retry_after_seconds", "retry_async"]


class Retry(Enum):
    """How a fleet call may be retried (the client picks one per call)."""

    SAFE = "safe"
    """Idempotent call: retry transport errors and transient 5xx."""
    UNSENT = "unsent"
    """Call that changes the container: retry only when it never reached the pool."""
    ALLOCATE = "allocate"
    """Idempotent by request id: retry 429 (honouring Retry-After) and 5xx until the allocate deadline."""


log = logging.getLogger(__name__)
T = TypeVar("T")


class TryAgain(Exception):
    """Raised by an attempt whose failure is worth repeating; ``error`` is what the caller sees at the end."""

    def __init__(self, error: BaseException, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        """Seconds the server asked us to wait (Retry-After), used instead of the backoff delay."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how fast to repeat."""

    retries: int | None = 3
    """Retries after the first attempt; None: no count limit (then give a deadline)."""
    backoff: float = 0.5
    """Delay before the first retry, in seconds."""
    factor: float = 2.0
    """Each next delay is this many times the previous one."""
    backoff_max: float = float("inf")
    """Longest delay between two attempts."""
    jitter: bool = False
    """Draw each delay from [d/2, d] (so that many clients do not retry in step)."""
    deadline: float | None = None
    """Seconds from the first attempt after which no retry is made."""

    def delay(self, retry: int) -> float:
        """Delay before retry number ``retry`` (0 for the first), jitter included."""
        delay = min(self.backoff_max, self.backoff * self.factor**retry)
        return random.uniform(delay / 2, delay) if self.jitter else delay


async def retry_async(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    retryable: Callable[[BaseException], bool] = lambda exc: False,
    name: str = "call",
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] | None = None,
) -> T:
    """Run ``attempt`` until it returns, repeating retryable failures as ``policy`` allows."""
    if policy.retries is None and policy.deadline is None:
        raise ValueError("a retry policy without a retry count needs a deadline")
    clock = clock or asyncio.get_running_loop().time
    deadline = None if policy.deadline is None else clock() + policy.deadline
    retries = 0
    while True:
        try:
            return await attempt()
        except TryAgain as exc:
            error, retry_after = exc.error, exc.retry_after
        except Exception as exc:
            if not retryable(exc):
                raise
            error, retry_after = exc, None
        delay = retry_after if retry_after is not None else policy.delay(retries)
        retries += 1
        if policy.retries is not None and retries > policy.retries:
            raise error
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise error
            delay = min(delay, remaining)
        log.debug("%s failed (%s); retry %d in %.1fs", name, error, retries, delay)
        await sleep(delay)


def retry_after_seconds(header: str | None, default: float = 1.0, minimum: float = 0.1) -> float:
    """A Retry-After header (seconds) as a delay: at least ``minimum``, stretched by 0-20% so that clients
    told the same thing do not all come back at once; ``default`` when it is not a number."""
    try:
        return max(minimum, float(header if header is not None else default)) * random.uniform(1.0, 1.2)
    except ValueError:
        return default
