"""Exactly-once container calls: a call sent again with its id gets the first one's answer.

Why: a call can be cut after the pool received it (a connection reset, a keep-alive connection closed
under load, a network blip). The client then cannot tell whether its command ran, so without this it
must give up, and the trajectory is lost. A client that names its call (`CALL_ID_HEADER`) may send it
again: the pool answers a call id it knows with the first call's answer (waiting for it while it still
runs) and runs only a call it never saw. A call sent again carries `RESENT_HEADER`, the pool instance
(`BOOT_HEADER`, on every answer) the client talked to before it sent the call first; a pool that
restarted since, or that no longer keeps the answer, cannot know whether it ran, and says so (503,
`may_have_run`) instead of running it twice. Answers are kept `keep_seconds` and within `max_bytes`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.responses import Response

from swe_rl.fleet.protocol import ApiError

Answer = tuple[Response, str]
"""An answer and its outcome label for the metrics."""


@dataclass
class _Call:
    key: tuple[str, str]  # (op, lease id): a call id is not reused for another call
    answer: asyncio.Future[Answer] = field(repr=False)
    finished: float = 0.0
    size: int = 0


class CallReplay:
    """The answers of recent named calls, by call id (one per pool process)."""

    def __init__(
        self,
        keep_seconds: float = 120.0,
        max_bytes: int = 64 << 20,
        max_forgotten: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.boot = secrets.token_hex(8)
        self.keep_seconds, self.max_bytes, self.max_forgotten = keep_seconds, max_bytes, max_forgotten
        self.clock = clock
        self.running: dict[str, _Call] = {}
        self.done: OrderedDict[str, _Call] = OrderedDict()  # in the order they finished
        self.forgotten: OrderedDict[str, None] = OrderedDict()  # ids whose answer was dropped
        self.bytes = 0
        self.replayed = 0  # answers given again (metrics)

    async def run(
        self,
        call_id: str,
        key: tuple[str, str],
        resent_by: str | None,
        produce: Callable[[], Awaitable[Answer]],
    ) -> Answer:
        """The answer of call `call_id`: the first one's if known, else `produce()`'s (once)."""
        self._expire()
        known = self.running.get(call_id) or self.done.get(call_id)
        if known is not None:
            if known.key != key:
                raise ApiError(400, f"call id {call_id!r} was used for another call ({known.key[0]})")
            self.replayed += 1
            response, _ = await asyncio.shield(known.answer)
            return response, "replayed"
        if resent_by is not None:
            if call_id in self.forgotten:
                raise ApiError(503, "this call ran, and its answer is no longer kept", may_have_run=True)
            if resent_by != self.boot:
                raise ApiError(
                    503, "the pool restarted since this call was sent: it may have run", may_have_run=True
                )
            # the same pool never saw it: the first send did not arrive, so it runs now
        call = _Call(key, asyncio.get_running_loop().create_future())
        self.running[call_id] = call
        try:
            response, outcome = await produce()
        except BaseException as exc:  # cancelled (shutdown): whether it ran is unknown
            del self.running[call_id]
            self._remember_dropped(call_id)
            call.answer.set_exception(ApiError(503, "the call was cut short in the pool", may_have_run=True))
            call.answer.exception()  # retrieved: no warning when nobody waits
            raise exc
        del self.running[call_id]
        if response.status_code not in (401, 499):  # (refused before, or body never read: nothing ran)
            call.finished, call.size = self.clock(), len(response.body)
            self.done[call_id] = call
            self.bytes += call.size
        call.answer.set_result((response, outcome))
        self._expire()
        return response, outcome

    def _expire(self) -> None:
        """Drop answers older than keep_seconds, then the oldest until within max_bytes."""
        cutoff = self.clock() - self.keep_seconds
        while self.done:
            call_id, call = next(iter(self.done.items()))
            if call.finished >= cutoff and self.bytes <= self.max_bytes:
                break
            del self.done[call_id]
            self.bytes -= call.size
            self._remember_dropped(call_id)

    def _remember_dropped(self, call_id: str) -> None:
        self.forgotten[call_id] = None
        while len(self.forgotten) > self.max_forgotten:
            self.forgotten.popitem(last=False)
