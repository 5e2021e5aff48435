"""An operation that runs commands, written once, run either on its thread or parked between commands.

An operation (an exec, an evaluation) is a generator: it yields each `Command` it needs run and gets the
`CommandOutcome` back (or the backend's error thrown in, at the yield), and returns its answer. `FlowRun`
drives it: with a backend that starts commands without waiting (`StartsCommands`: Docker, whose streams
the command lane reads) and a `park` function, it parks the request at each command (`parking.py`) and is
stepped again once the command ended; otherwise it waits on the thread (`exec_run`), as before. Either
way the operation's `with` blocks (its container marked busy) stay open across its commands.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, TypeGuard, TypeVar, runtime_checkable

from swe_rl.fleet.exec.backend import BackendError, NodeBackend
from swe_rl.fleet.exec.executor import CommandOutcome

T = TypeVar("T")


@dataclass(frozen=True)
class Command:
    """One command of an operation: `NodeBackend.exec_run`'s arguments."""

    container_id: str
    command: str
    timeout: float
    workdir: str | None
    env: Mapping[str, str] | None
    max_output: int
    merge_stderr: bool = True
    user: str | None = None

    def args(self) -> dict[str, Any]:
        return {
            "timeout": self.timeout,
            "workdir": self.workdir,
            "env": self.env,
            "max_output": self.max_output,
            "merge_stderr": self.merge_stderr,
            "user": self.user,
        }


Flow = Generator[Command, CommandOutcome, T]
"""An operation: yields the commands it runs, returns its answer."""


class Started(Protocol):
    def on_end(self, callback: Callable[[], None]) -> None: ...

    def wait(self) -> None: ...


@runtime_checkable
class StartsCommands(Protocol):
    """A backend that can start a command and let it run with no thread waiting for it."""

    def start_command(self, container_id: str, command: str, **kw: Any) -> Started: ...

    def command_outcome(self, started: Any) -> CommandOutcome: ...


def starts_commands(backend: object) -> TypeGuard[StartsCommands]:
    """`isinstance(backend, StartsCommands)`, without typing's protocol check (it lists the protocol's
    members again on every call: ~8 us of CPU per exec)."""
    return callable(getattr(backend, "start_command", None)) and callable(
        getattr(backend, "command_outcome", None)
    )


Park = Callable[[Started], NoReturn]
"""Leaves the request until the started command ended (raises `parking.Parked`)."""


class FlowRun(Generic[T]):
    """One operation being driven; keeps what it waits for between two steps."""

    def __init__(self, flow: Flow[T], backend: NodeBackend) -> None:
        self._flow = flow
        self._backend = backend
        self._value: CommandOutcome | None = None
        self._error: BaseException | None = None
        self._waiting: Started | None = None

    def step(self, park: Park | None = None) -> T:
        """Run the operation to its answer, or (with `park`) until its next command started: `park` is
        then called and does not return; call `step` again once that command ended."""
        try:
            return self._step(park)
        except Exception:
            self._flow.close()  # its `with` blocks exit (a no-op when the error came out of it)
            raise

    def _step(self, park: Park | None) -> T:
        starts = self._backend if starts_commands(self._backend) else None
        while True:
            if self._waiting is not None:
                self._collect()
            try:
                if self._error is not None:
                    error, self._error = self._error, None
                    command = self._flow.throw(error)
                else:
                    value, self._value = self._value, None
                    command = self._flow.send(value)  # type: ignore[arg-type]  # None starts it
            except StopIteration as stop:
                result: T = stop.value
                return result
            try:
                if starts is None:
                    self._value = self._backend.exec_run(
                        command.container_id, command.command, **command.args()
                    )
                    continue
                self._waiting = starts.start_command(command.container_id, command.command, **command.args())
            except BackendError as exc:
                self._error = exc
                continue
            if park is None:
                self._waiting.wait()
            else:
                park(self._waiting)

    def _collect(self) -> None:
        started, self._waiting = self._waiting, None
        try:
            self._value = self._backend.command_outcome(started)  # type: ignore[attr-defined]
        except BackendError as exc:
            self._error = exc


def run_flow(flow: Flow[T], backend: NodeBackend) -> T:
    """The operation to its answer on this thread."""
    return FlowRun(flow, backend).step()
