"""Docker's way of running one command: `exec_create` + a raw socket of multiplexed frames, killed on deadline.

Part of the Docker backend (`docker_backend.py`); the shell it runs and the outcome it answers are
backend-neutral (`executor.py`).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import docker
import docker.errors

from swe_rl.fleet.exec.command_lane import CommandLane
from swe_rl.fleet.exec.daemon_watch import DaemonNotAnswering
from swe_rl.fleet.exec.executor import (
    BOOT_ID,
    KILLER,
    MARKER_VAR,
    MERGED_WRAPPER,
    TICKS,
    TIMEOUT_RETURNCODE,
    WRAPPER,
    CommandOutcome,
    CommandStart,
    pid_in_container,
    start_ticks,
)
from swe_rl.fleet.output import HeadTailBuffer

log = logging.getLogger("swe_exec_server")


KILL_PASSES = 20
"""Host kill + in-container kill rounds before giving up on a command whose exec never reports an exit."""


def _hung() -> DaemonNotAnswering:
    return DaemonNotAnswering(
        "the node's Docker daemon stopped answering during this command: it may have run"
    )


def _raw_socket(sock: Any) -> socket.socket:
    return getattr(sock, "_sock", sock)


def _split_frames(buf: bytearray, out: HeadTailBuffer, err: HeadTailBuffer) -> None:
    """Move every whole multiplexed frame (8-byte header: stream, length) from `buf` to its output."""
    while len(buf) >= 8:
        stream, length = struct.unpack(">BxxxL", bytes(buf[:8]))
        if len(buf) < 8 + length:
            return
        payload = bytes(buf[8 : 8 + length])
        del buf[: 8 + length]
        (err if stream == 2 else out).write(payload)


def _read_with_the_headers(sock: Any) -> bytes:
    """The stream's bytes the HTTP client already took while reading the exec's answer headers.

    Why: the headers are read through a buffered reader, which takes whatever else the daemon has written
    by then (a fast command's frames, even all of them); reading only the raw socket afterwards lost them
    (seen under load: `echo err >&2` answered '' with exit 0). Takes what is buffered, never waits.
    """
    response = getattr(sock, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is None or not hasattr(reader, "read1"):
        return b""
    raw = _raw_socket(sock)
    raw.setblocking(False)  # an empty buffer then reads nothing more than is already on the socket
    try:
        return reader.read1(65536) or b""
    except (BlockingIOError, OSError, ValueError):
        return b""


class ExecStream:
    """One started command: its output stream as the command lane reads it (`command_lane.Stream`), and
    its end as a waiter sees it (`on_end`, `wait`). Made by `DockerExecutor.start`."""

    def __init__(
        self,
        executor: DockerExecutor,
        container_id: str,
        tag: str,
        exec_id: str,
        began: CommandStart,
        timeout: float,
        handle: Any,
        out: HeadTailBuffer,
        err: HeadTailBuffer,
        early: bytes,
    ) -> None:
        self.executor, self.container_id, self.tag, self.exec_id = executor, container_id, tag, exec_id
        self.began = began
        self.deadline = began.monotonic + timeout
        self._handle = handle
        """docker-py's socket object (closed at the end; `sock` is the socket under it)."""
        self.sock: socket.socket = _raw_socket(handle)
        self.out, self.err = out, err
        self._buf = bytearray(early)
        _split_frames(self._buf, out, err)
        self.timed_out = False
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    # the lane's side

    def received(self, chunk: bytes) -> None:
        self._buf += chunk
        _split_frames(self._buf, self.out, self.err)

    def start_kill(self, on_killed: Callable[[], None]) -> None:
        def kill() -> None:
            try:
                self.executor.kill_group(self.container_id, self.tag, self.exec_id, self.began)
            except Exception:
                log.exception("kill of timed-out command in %s failed", self.container_id[:12])
            finally:
                on_killed()

        # From a thread of its own: it calls Docker and sleeps between passes (never on the lane).
        threading.Thread(target=kill, name="swe-kill", daemon=True).start()
        if self.executor.awaiting_kill is not None:
            self.executor.awaiting_kill(self.tag)

    def ended(self, timed_out: bool, error: BaseException | None) -> None:
        self.timed_out, self.error = timed_out, error
        self.executor._running.pop(self.tag, None)
        for closing in (self._handle, self.sock):
            try:
                closing.close()
            except OSError:
                pass
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    # the waiter's side

    def on_end(self, callback: Callable[[], None]) -> None:
        """`callback()` once the stream ended (at once, on this thread, when it already has)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self) -> None:
        self._done.wait()


class DockerExecutor:
    """Runs one command in a container with a deadline, streaming capped output.

    A command is started here (`start`: two Docker calls on the caller's thread), its stream read by the
    command lane (`command_lane.py`: no thread waits for it), and its outcome taken once it ended
    (`outcome`). A timed-out command's stream ends only after its kill finished (every process of the
    command gone), so a caller that reads `timed_out` can rely on nothing of it running any more.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        abandon: Callable[[], bool] = lambda: False,
        lane: CommandLane | None = None,
    ) -> None:
        self.api = client.api
        self.lane = lane or CommandLane(abandon=lambda: _hung() if abandon() else None)
        """Reads every running command's stream; ends them all at once when the daemon counts as hung."""
        self._running: dict[str, tuple[str, float]] = {}
        """Container and monotonic start of each running command and killer, by tag."""
        self._kill_locks = [threading.Lock() for _ in range(64)]
        """One killer at a time per container (striped): killers must not take each other for escapees."""
        self.before_kill: Callable[[str], None] | None = None
        """Test hook: called with the command's tag in the kill thread, before any kill (forces orders)."""
        self.awaiting_kill: Callable[[str], None] | None = None
        """Test hook: called with the command's tag once its kill started (its answer now waits for it)."""
        self.boot_id = BOOT_ID
        """This kernel's boot id: a container that reads the same runs on this kernel (tests change it)."""

    def run(
        self,
        container_id: str,
        command: str,
        *,
        timeout: float,
        workdir: str | None,
        env: Mapping[str, str] | None,
        max_output: int,
        merge_stderr: bool = True,
        user: str | None = None,
    ) -> CommandOutcome:
        """The command to its end, this thread waiting (server-internal commands; a request's commands
        start with `start` and wait parked, `parking.py`)."""
        stream = self.start(
            container_id,
            command,
            timeout=timeout,
            workdir=workdir,
            env=env,
            max_output=max_output,
            merge_stderr=merge_stderr,
            user=user,
        )
        stream.wait()
        return self.outcome(stream)

    def start(
        self,
        container_id: str,
        command: str,
        *,
        timeout: float,
        workdir: str | None,
        env: Mapping[str, str] | None,
        max_output: int,
        merge_stderr: bool = True,
        user: str | None = None,
    ) -> ExecStream:
        """Start the command and hand its stream to the lane; wait with the stream's `on_end`/`wait`."""
        tag = secrets.token_hex(8)
        began = CommandStart.now()
        self._running[tag] = (container_id, began.monotonic)
        out = HeadTailBuffer(max_output)
        err = out if merge_stderr else HeadTailBuffer(max_output)
        try:
            exec_id = self.api.exec_create(
                container_id,
                ["/bin/sh", "-c", MERGED_WRAPPER if merge_stderr else WRAPPER, command],
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
                workdir=workdir or None,
                environment={**(env or {}), MARKER_VAR: tag},
                user=user or "",
            )["Id"]
            handle = self.api.exec_start(exec_id, socket=True)
            early = _read_with_the_headers(handle)
        except BaseException:
            self._running.pop(tag, None)
            raise
        stream = ExecStream(self, container_id, tag, exec_id, began, timeout, handle, out, err, early)
        self.lane.watch(stream)
        return stream

    def outcome(self, stream: ExecStream) -> CommandOutcome:
        """What an ended stream's command did (asks Docker for its exit code unless it timed out)."""
        if stream.error is not None:
            raise stream.error
        if stream.timed_out:
            returncode = TIMEOUT_RETURNCODE
        else:
            returncode = self.api.exec_inspect(stream.exec_id).get("ExitCode")
            if returncode is None:
                returncode = -1
        out, err = stream.out, stream.err
        return CommandOutcome(
            returncode=returncode,
            output=out.getvalue(),
            stderr=b"" if err is out else err.getvalue(),
            timed_out=stream.timed_out,
            truncated=out.truncated,
            output_bytes=out.total,
            duration=time.monotonic() - stream.began.monotonic,
            stderr_truncated=err is not out and err.truncated,
        )

    def kill_group(self, container_id: str, tag: str, exec_id: str, started: CommandStart) -> None:
        """Kill the timed-out command's whole process group, and what escaped it, until its exec ended.

        Each pass kills first from the host when this server shares the daemon's PID namespace (needs
        no new process, so it works even when the container's pids limit is exhausted), then from
        inside the container (`KILLER`), which also covers a remote daemon and finds processes that
        left the group and cleared their environment. Passes repeat until the daemon reports the
        exec's exit. Why: the daemon answers `exec_start` before it starts the process, so on a loaded
        node a deadline can pass before the command exists (`Pid` 0); a kill then finds nothing and
        the command would start afterwards, unkilled.
        """
        if self.before_kill is not None:
            self.before_kill(tag)
        cutoff = ""
        for attempt in range(KILL_PASSES):
            try:
                info = self.api.exec_inspect(exec_id)
            except docker.errors.APIError:
                info = {}
            if info.get("ExitCode") is not None and not info.get("Running") and attempt:
                return  # ended, and one pass ran after its last process could fork
            host_pid = int(info.get("Pid") or 0)
            if info and not host_pid and info.get("ExitCode") is None:
                # Not started yet (the daemon says Running with Pid 0 for a moment): nothing of the
                # command may exist, and a kill now could only go by the start fallback, which (as an
                # age, for a remote daemon) takes a process started just before the command for its
                # own (seen: the `sleep infinity` of a container started a moment before, which
                # stopped the container).
                time.sleep(min(0.05 * 2**attempt, 1.0))
                continue
            if host_pid > 0 and pid_in_container(host_pid, container_id):
                cutoff = cutoff or start_ticks(host_pid)
                try:
                    os.killpg(host_pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            with self._kill_locks[hash(container_id) % len(self._kill_locks)]:
                used = self._kill_inside(container_id, tag, f"kill-{tag}", cutoff, started)
            if used is None:
                return  # the container is gone: nothing left to kill
            cutoff = cutoff or used  # later passes keep the start found while the command was alive
            time.sleep(min(0.05 * 2**attempt, 1.0))  # the daemon records the exit a moment later
        log.error(
            "timed-out command in %s reported no exit after %d kill passes", container_id[:12], KILL_PASSES
        )

    def _kill_inside(
        self, container_id: str, tag: str, kill_tag: str, cutoff: str, started: CommandStart
    ) -> str | None:
        """One `KILLER` run in the container: the cutoff it used ('' when unknown), or None when the
        container cannot run it any more.

        Without a cutoff (nothing of the command alive to date it) the killer takes the command's start
        on the boot clock when the container's kernel is this one (exact), else the age measured here
        less a margin for the killer reading its clock later (which can reach a process started just
        before the command: seen, a container's own `sleep infinity`, which stopped the container)."""
        age = int((time.monotonic() - started.monotonic) * TICKS) + TICKS // 5
        self._running[kill_tag] = (container_id, time.monotonic())
        keep = " ".join(t for t, (cid, _) in list(self._running.items()) if cid == container_id and t != tag)
        try:
            kill_id = self.api.exec_create(
                container_id,
                ["/bin/sh", "-c", KILLER, tag, cutoff, str(age), keep, self.boot_id, str(started.boot_tick)],
                environment={MARKER_VAR: kill_tag},
                user="0",
            )["Id"]  # whoever ran it
            said = self.api.exec_start(kill_id)
        except docker.errors.APIError as exc:  # container died meanwhile: nothing left to kill
            log.warning("kill of timed-out command in %s failed: %s", container_id[:12], exc)
            return None
        finally:
            self._running.pop(kill_tag, None)
        match = re.search(rb"^cutoff (\d+)$", said or b"", re.M)
        return match.group(1).decode() if match else ""
