"""Where a grading's time goes: seconds per pipeline stage, recorded only when someone asks.

`bench/grading_bench.py` wraps each grading in `recording()` and prints the per-stage breakdown;
outside it `stage()` costs one context-variable read. The clock is a plain dict shared by every task
the grading spawns (a context variable's value is copied by reference into child tasks).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["recording", "stage", "tick"]

_CLOCK: ContextVar[dict[str, float] | None] = ContextVar("grading_stage_clock", default=None)


@contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Record the stages of the gradings run inside: stage name -> seconds (summed over repeats)."""
    clock: dict[str, float] = {}
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage `name` (nothing when no recording is on)."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        clock[name] = clock.get(name, 0.0) + time.perf_counter() - started


def tick(name: str, amount: float = 1.0) -> None:
    """Add `amount` to counter `name` (e.g. container round trips) when a recording is on."""
    clock = _CLOCK.get()
    if clock is not None:
        clock[name] = clock.get(name, 0.0) + amount
