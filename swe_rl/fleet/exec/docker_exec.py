"""Docker's way of running one command: `exec_create` + a raw socket of multiplexed frames, killed on deadline.

Part of the Docker backend (`docker_backend.py`); the shell it runs and the outcome it answers are
backend-neutral (`executor.py`).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors

from swe_rl.fleet.exec.executor import (
    KILLER,
    MARKER_VAR,
    MERGED_WRAPPER,
    TICKS,
    TIMEOUT_RETURNCODE,
    WRAPPER,
    CommandOutcome,
    pid_in_container,
    start_ticks,
)
from swe_rl.fleet.output import HeadTailBuffer

log = logging.getLogger("swe_exec_server")


def _raw_socket(sock: Any) -> socket.socket:
    return getattr(sock, "_sock", sock)


class DockerExecutor:
    """Runs one command in a container with a deadline, streaming capped output."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.api = client.api
        self._running: dict[str, tuple[str, float]] = {}
        """Container and monotonic start of each running command and killer, by tag."""
        self._kill_locks = [threading.Lock() for _ in range(64)]
        """One killer at a time per container (striped): killers must not take each other for escapees."""

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
        start = time.monotonic()
        self._running[tag] = (container_id, start)
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
        out = HeadTailBuffer(max_output)
        err = out if merge_stderr else HeadTailBuffer(max_output)
        sock = self.api.exec_start(exec_id, socket=True)
        raw = _raw_socket(sock)
        deadline = start + timeout
        timed_out = False
        try:
            timed_out = self._pump(raw, out, err, deadline, container_id, tag, exec_id)
        finally:
            self._running.pop(tag, None)
            try:
                sock.close()
            except OSError:
                pass
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

    def _pump(
        self,
        raw: socket.socket,
        out: HeadTailBuffer,
        err: HeadTailBuffer,
        deadline: float,
        container_id: str,
        tag: str,
        exec_id: str,
    ) -> bool:
        """Read multiplexed frames until EOF; on deadline kill the group and drain briefly."""
        buf = bytearray()
        timed_out = False
        hard_stop = None
        raw.settimeout(0.2)
        while True:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                # Kill from another thread: the daemon may block until this stream is drained.
                threading.Thread(
                    target=self.kill_group, args=(container_id, tag, exec_id), daemon=True
                ).start()
                hard_stop = time.monotonic() + 5.0  # let the stream close after the kill
            if hard_stop is not None and now >= hard_stop:
                break  # something outside the group holds the stream open: abandon it
            try:
                chunk = raw.recv(65536)
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 8:
                stream, length = struct.unpack(">BxxxL", bytes(buf[:8]))
                if len(buf) < 8 + length:
                    break
                payload = bytes(buf[8 : 8 + length])
                del buf[: 8 + length]
                (err if stream == 2 else out).write(payload)
        return timed_out

    def kill_group(self, container_id: str, tag: str, exec_id: str) -> None:
        """Kill the timed-out command's whole process group, and what escaped it.

        First from the host when this server shares the daemon's PID namespace
        (needs no new process, so it works even when the container's pids limit
        is exhausted), then from inside the container (`KILLER`), which also
        covers a remote daemon and finds processes that left the group and
        cleared their environment.
        """
        started = self._running.get(tag, (container_id, time.monotonic()))[1]
        kill_tag = f"kill-{tag}"
        try:
            host_pid = int(self.api.exec_inspect(exec_id).get("Pid") or 0)
        except docker.errors.APIError:
            host_pid = 0
        cutoff = ""
        if host_pid > 0 and pid_in_container(host_pid, container_id):
            cutoff = start_ticks(host_pid)
            try:
                os.killpg(host_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        with self._kill_locks[hash(container_id) % len(self._kill_locks)]:
            self._kill_inside(container_id, tag, kill_tag, cutoff, started)

    def _kill_inside(self, container_id: str, tag: str, kill_tag: str, cutoff: str, started: float) -> None:
        age = int((time.monotonic() - started) * TICKS) + TICKS // 5  # a little before the start
        self._running[kill_tag] = (container_id, time.monotonic())
        keep = " ".join(t for t, (cid, _) in list(self._running.items()) if cid == container_id and t != tag)
        try:
            kill_id = self.api.exec_create(
                container_id,
                ["/bin/sh", "-c", KILLER, tag, cutoff, str(age), keep],
                environment={MARKER_VAR: kill_tag},
                user="0",
            )["Id"]  # whoever ran it
            self.api.exec_start(kill_id)
        except docker.errors.APIError as exc:  # container died meanwhile: nothing left to kill
            log.warning("kill of timed-out command in %s failed: %s", container_id[:12], exc)
        finally:
            self._running.pop(kill_tag, None)
