"""Prefetch hints from a run that knows its order: as instance N starts, the images of the next K go
to the pool's `POST /prefetch`, so the nodes pull them while instance N runs.

Used by eval (the instance list) and the slime layer (the prompt data in file order). A hint is
fire-and-forget: a failed one is logged and never fails a rollout.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

Send = Callable[[dict[str, int]], Awaitable[Any]]


class PrefetchHints:
    """Images in run order; `after(key)` hints the `ahead` images that follow `key` (each once)."""

    def __init__(self, send: Send, order: Sequence[tuple[str, str]], ahead: int) -> None:
        """`order`: (instance id, image) in the order the run takes them."""
        self.send, self.order, self.ahead = send, list(order), max(0, ahead)
        self.position = {key: n for n, (key, _) in enumerate(self.order)}
        self.sent_until = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    def after(self, key: str | None) -> dict[str, int]:
        """Hint the images of the `ahead` instances after `key` (None: the first ones) not hinted yet."""
        n = -1 if key is None else self.position.get(key)
        if n is None or not self.ahead:
            return {}
        start, end = max(self.sent_until, n + 1), min(len(self.order), n + 1 + self.ahead)
        if start >= end:
            return {}
        self.sent_until = end
        images = dict(Counter(image for _, image in self.order[start:end]))
        task = asyncio.ensure_future(self._send(images))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return images

    async def _send(self, images: dict[str, int]) -> None:
        try:
            await self.send(images)
        except Exception as exc:  # noqa: BLE001 - a hint never fails the run
            log.info("prefetch hint of %d images failed: %s", len(images), exc)
