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


KILL_WAIT = 300.0
"""Upper bound on the wait for a timed-out command's kill before its answer leaves anyway (logged as an
error). Far above the kill's own time (one `docker exec` per pass, even on a loaded node)."""
KILL_PASSES = 20
"""Host kill + in-container kill rounds before giving up on a command whose exec never reports an exit."""
DRAIN_AFTER_KILL = 2.0
"""Seconds the stream is still read after the kill finished (what the dead processes wrote last)."""


class DockerExecutor:
    """Runs one command in a container with a deadline, streaming capped output.

    A timed-out command's answer leaves only after its kill finished (every process of the command
    gone), so a caller that reads `timed_out` can rely on nothing of it running any more.
    """

    def __init__(self, client: docker.DockerClient, abandon: Callable[[], bool] = lambda: False) -> None:
        self.api = client.api
        self._abandon = abandon
        """True once the daemon counts as hung (`daemon_watch`): a command's stream is left at once."""
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
        tag = secrets.token_hex(8)
        began = CommandStart.now()
        start = began.monotonic
        self._running[tag] = (container_id, start)
        killed = threading.Event()
        out = HeadTailBuffer(max_output)
        err = out if merge_stderr else HeadTailBuffer(max_output)
        timed_out = False
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
            sock = self.api.exec_start(exec_id, socket=True)

            def kill() -> None:
                try:
                    self.kill_group(container_id, tag, exec_id, began)
                finally:
                    killed.set()

            def start_kill() -> None:
                # Kill from another thread: the daemon may block until this stream is drained.
                threading.Thread(target=kill, daemon=True).start()
                if self.awaiting_kill is not None:
                    self.awaiting_kill(tag)

            try:
                early = _read_with_the_headers(sock)
                timed_out = self._pump(
                    _raw_socket(sock), out, err, start + timeout, start_kill, killed, bytearray(early)
                )
            finally:
                if timed_out:
                    self._await_kill(tag, killed, container_id)
                try:
                    sock.close()
                except OSError:
                    pass
        finally:
            self._running.pop(tag, None)
        if timed_out:
            returncode = TIMEOUT_RETURNCODE
        else:
            info = self.api.exec_inspect(exec_id)
            returncode = info.get("ExitCode")
            if returncode is None:
                returncode = -1
        return CommandOutcome(
            returncode=returncode,
            output=out.getvalue(),
            stderr=b"" if merge_stderr else err.getvalue(),
            timed_out=timed_out,
            truncated=out.truncated,
            output_bytes=out.total,
            duration=time.monotonic() - start,
            stderr_truncated=err is not out and err.truncated,
        )

    def _await_kill(self, tag: str, killed: threading.Event, container_id: str) -> None:
        """The answer of a timed-out command waits for its kill. Why: answering first let a caller see
        the command's escaped processes alive after `timed_out` (seen under load: two timeouts at once,
        the second kill queued behind the first for longer than the old 5 s drain)."""
        if not killed.wait(KILL_WAIT):
            log.error(
                "kill of timed-out command in %s still running after %.0f s", container_id[:12], KILL_WAIT
            )

    def _pump(
        self,
        raw: socket.socket,
        out: HeadTailBuffer,
        err: HeadTailBuffer,
        deadline: float,
        kill: Callable[[], None],
        killed: threading.Event,
        buf: bytearray,
    ) -> bool:
        """Read multiplexed frames (after those already in `buf`) until EOF; on deadline start the kill
        and drain until it is done."""
        timed_out = False
        hard_stop = None
        _split_frames(buf, out, err)
        raw.settimeout(0.2)
        while True:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                kill()
            if timed_out and hard_stop is None and killed.is_set():
                hard_stop = now + DRAIN_AFTER_KILL  # let the stream close after the kill
            if hard_stop is not None and now >= hard_stop:
                break  # something outside the command holds the stream open: abandon it
            try:
                chunk = raw.recv(65536)
            except (TimeoutError, BlockingIOError):
                if self._abandon():
                    raise DaemonNotAnswering(
                        "the node's Docker daemon stopped answering during this command: it may have run"
                    ) from None
                continue
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            _split_frames(buf, out, err)
        return timed_out

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
