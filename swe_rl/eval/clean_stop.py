"""Ctrl-C / SIGTERM as a clean stop for long eval-side runs (eval, grading, certification).

    stop = CleanStop()
    stop.install()                                   # inside the running event loop
    await stop.run_all(one(i) for i in todo)         # each coroutine: one instance, writes its own row
    ...write summary.json / report.html for what finished...
    if stop.signal_name:
        print(stop.resume_line(finished, total, command_line("swe_rl.eval.eval_swe", argv)), file=sys.stderr)
        return EXIT_INTERRUPTED                      # 130, like a shell's Ctrl-C

The first SIGINT or SIGTERM stops scheduling and cancels the running instances: their
`async with` blocks release the fleet's leases on the way out (the lease close is shielded),
and an instance cancelled midway writes no row, so a resume runs it again. The caller then
writes its summary for what finished. A second signal while that happens gives the default
behaviour back (a third Ctrl-C raises KeyboardInterrupt at once).

While it waits, it says for what: ``stopping: releasing the containers of 2 cancelled instances
...`` at once and every few seconds until they are released (`say_stopping` for the steps after,
e.g. the local fleet's shutdown), so a slow stop under load never looks like a hang.
"""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
from collections.abc import Awaitable, Iterable
from typing import Any

__all__ = [
    "EXIT_INTERRUPTED",
    "CleanStop",
    "command_line",
    "resume_line",
    "say_stopping",
    "sigterm_as_interrupt",
]

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a job stopped by Ctrl-C
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CleanStop:
    """Turns the first SIGINT/SIGTERM into "cancel the running work and return normally"."""

    def __init__(self, what: str = "instances", report_every: float = 3.0) -> None:
        self.signal_name: str | None = None
        """SIGINT / SIGTERM once one arrived, else None."""
        self.what = what
        """What one coroutine of `run_all` is, in the stop's messages."""
        self.report_every = report_every
        """Seconds between the "still releasing" lines while cancelled work winds down."""
        self._reporter: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._installed: list[signal.Signals] = []

    @property
    def stopped(self) -> bool:
        return self.signal_name is not None

    def install(self) -> CleanStop:
        """Handle SIGINT and SIGTERM on the running loop (main thread only; elsewhere a no-op)."""
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            try:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
                self._installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
                pass
        return self

    def uninstall(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            for sig in self._installed:
                self._loop.remove_signal_handler(sig)
        self._installed = []

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.stopped:  # a second signal: hand the default handlers back
            print(
                f"\n{sig.name} again: the next one stops at once (cleanup may be incomplete)",
                file=sys.stderr,
                flush=True,
            )
            self.uninstall()
            return
        self.request(sig.name)

    def request(self, name: str = "stop") -> None:
        """Stop as a signal would (also for tests and callers with their own reasons)."""
        if self.stopped:
            return
        self.signal_name = name
        running = [t for t in self._tasks if not t.done()]
        print(
            f"\n{name}: stopping - no new instances; cancelling {len(running)} unfinished "
            "(their containers are released)...",
            file=sys.stderr,
            flush=True,
        )
        for task in running:
            task.cancel()
        if running and self._loop is not None and not self._loop.is_closed():
            self._reporter = self._loop.create_task(self._report_waiting())

    async def _report_waiting(self) -> None:
        """Say what the stop waits for until the cancelled work has released its containers."""
        assert self._loop is not None
        started = self._loop.time()
        while left := sum(1 for t in self._tasks if not t.done()):
            waited = self._loop.time() - started
            say_stopping(
                f"releasing the containers of {left} cancelled {self.what}"
                + (f" (waiting {waited:.0f}s)" if waited >= 1 else "")
            )
            await asyncio.sleep(self.report_every)

    async def run_all(self, coros: Iterable[Awaitable[Any]]) -> list[Any]:
        """Run the coroutines concurrently until all are done or a stop cancels the rest.
        Returns the results of those that finished; an exception other than the cancellation
        is raised again (each coroutine is expected to catch its own)."""
        tasks = []
        for coro in coros:
            if self.stopped:
                if hasattr(coro, "close"):
                    coro.close()  # never started: no "never awaited" warning
                continue
            tasks.append(asyncio.ensure_future(coro))
        self._tasks.update(tasks)
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._tasks.difference_update(tasks)
            if self._reporter is not None:
                self._reporter.cancel()
                self._reporter = None
                print(
                    f"stopping: the cancelled {self.what} released their containers",
                    file=sys.stderr,
                    flush=True,
                )
        done = []
        for result in results:
            if isinstance(result, asyncio.CancelledError):
                continue
            if isinstance(result, BaseException):
                raise result
            done.append(result)
        if not self.stopped and any(t.cancelled() for t in tasks):
            raise asyncio.CancelledError  # cancelled from outside, not by a signal: pass it on
        return done

    def resume_line(self, finished: int, total: int, command: str, what: str = "instances") -> str:
        return resume_line(self.signal_name or "stop", finished, total, command, what)


def say_stopping(what: str) -> None:
    """One ``stopping: <what> ...`` line on stderr: what a stop is waiting for now."""
    print(f"stopping: {what} ...", file=sys.stderr, flush=True)


def resume_line(signal_name: str, finished: int, total: int, command: str, what: str = "instances") -> str:
    """The one line telling the user how to go on (``command``: see `command_line`)."""
    return (
        f"interrupted ({signal_name}): {finished} of {total} {what} finished; "
        f"run the same command again to resume: {command}"
    )


def command_line(module: str, argv: list[str] | None = None) -> str:
    """``<this interpreter> -m <module> <args>`` (``argv`` None: this process's own arguments).

    The interpreter that ran (``sys.executable``), not a bare ``python`` that may be another one
    (a system Python without this package, a different venv), so the resume hint runs as it is."""
    return shlex.join([sys.executable, "-m", module, *(sys.argv[1:] if argv is None else argv)])


def sigterm_as_interrupt() -> None:
    """Outside the event loop (start-up, a local fleet starting): SIGTERM raises KeyboardInterrupt like
    Ctrl-C, so ``with`` blocks (a `LocalFleet`) clean up instead of the process dying on the spot."""

    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    try:
        signal.signal(signal.SIGTERM, _raise)
    except ValueError:  # not the main thread
        pass
