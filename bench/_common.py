"""Helpers shared by the fleet benches (scale_bench.py, replica_bench.py), importable when a bench runs
as a script (`python3 bench/x.py` puts bench/ first on the path): percentiles, a process's CPU seconds,
a gate on calls in flight, the machine's load, and pinning processes to CPUs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any


def pct(values: list[float], q: float) -> float:
    """The q-quantile of values (seconds) in milliseconds; nan when there are none."""
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000 if s else float("nan")


def cpu_s(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of a process (all its threads); 0.0 once it is gone. `reaped`: plus its
    children's that exited and were waited for (PostgreSQL's backends come and go)."""
    try:
        fields = open(f"/proc/{pid}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


async def gated(n: int, limit: int, fn: Callable[[int], Awaitable[Any]]) -> list[Any]:
    """fn(0) .. fn(n-1), at most `limit` at a time; their results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(i: int) -> Any:
        async with gate:
            return await fn(i)

    return await asyncio.gather(*(one(i) for i in range(n)))


def load_average() -> str:
    """The machine's 1/5/15-minute load averages, as `uptime` prints them (the machine may be shared)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread of process pid onto `cpus` (sched_setaffinity acts on one thread: each task of
    /proc/<pid>/task is set; threads started later inherit their starter's set). A process gone meanwhile
    is skipped."""
    cpus = set(cpus)
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def descendants(pid: int) -> list[int]:
    """pid's child processes, their children and so on (from /proc/<pid>/task/*/children)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", encoding="ascii") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found
