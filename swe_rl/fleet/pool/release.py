"""Destroying released containers off the request path (used by pool.py).

Why: removing a container costs the Docker daemon 100-200 ms, which `close` used to wait for.
A lease is released at once; its container is destroyed right after in the background and
the destroy is still guaranteed: retried with backoff while the node is down or failing
(a node that comes back is also reconciled, which removes it as an orphan), and counted in
the pool's metrics (`swe_pool_destroys_total{outcome}`, `swe_pool_destroys_pending`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("swe_pool_server")

Post = Callable[[Any, str, dict[str, Any], float], Awaitable[Any]]


class DestroyQueue:
    """Background destroys, one task per container, until the node says it is gone."""

    def __init__(self, post: Post, metrics: Any, *, give_up: float = 3600.0, max_delay: float = 10.0) -> None:
        self.post, self.metrics = post, metrics
        self.give_up, self.max_delay = give_up, max_delay
        self.tasks: dict[str, asyncio.Task[bool]] = {}
        self.stopping = False
        """At shutdown a destroy is tried once more, not for an hour."""

    def __len__(self) -> int:
        return len(self.tasks)

    def submit(self, node: Any, container_id: str) -> asyncio.Task[bool]:
        task = self.tasks.get(container_id)
        if task is None:
            task = asyncio.create_task(self._destroy(node, container_id))
            self.tasks[container_id] = task
            task.add_done_callback(lambda t: self.tasks.pop(container_id, None))
        return task

    async def _destroy(self, node: Any, container_id: str) -> bool:
        delay, deadline, attempt = 0.5, time.monotonic() + self.give_up, 0
        while True:
            attempt += 1
            error = "node is down"
            if node.healthy:
                try:
                    resp = await self.post(node, "/container/destroy", {"container_id": container_id}, 60.0)
                    if resp.status_code in (200, 404):  # 404: already gone (reaped or reconciled)
                        self.metrics.inc(
                            "swe_pool_destroys_total", outcome="ok" if attempt == 1 else "retried_ok"
                        )
                        return True
                    error = f"answered {resp.status_code}"
                except Exception as exc:  # noqa: BLE001 - any failure is retried
                    error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            if self.stopping or time.monotonic() > deadline:
                self.metrics.inc("swe_pool_destroys_total", outcome="abandoned")
                log.warning(
                    "destroy of %s on %s abandoned after %d attempts (%s): left to the node's reaper",
                    container_id[:12],
                    node.url,
                    attempt,
                    error,
                )
                return False
            if attempt == 1:
                log.info("destroy of %s on %s failed (%s): retrying", container_id[:12], node.url, error)
            self.metrics.inc("swe_pool_destroys_total", outcome="retry")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_delay)

    async def drain(self, timeout: float) -> int:
        """Wait for the destroys in flight (shutdown); returns how many succeeded."""
        self.stopping = True
        tasks = list(self.tasks.values())
        if not tasks:
            return 0
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        return sum(1 for t in done if not t.cancelled() and t.exception() is None and t.result())
