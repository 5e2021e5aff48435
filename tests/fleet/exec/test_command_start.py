"""A command's start on the boot clock: the tick after the one `run` was called in (no Docker)."""

from __future__ import annotations

import time

from swe_rl.fleet.exec.executor import TICKS, CommandStart


def test_start_is_the_tick_after_the_calls_own(monkeypatch):
    """A process started in the same tick as the call (so before it) is never taken for the command's:
    the first tick the command can own is the next one, at a tick's very start too."""
    for seconds in (12.345, 12.3400001, 12.0):
        monkeypatch.setattr(time, "clock_gettime", lambda _clock, s=seconds: s)
        assert CommandStart.now().boot_tick == int(seconds * TICKS) + 1
