"""Running one command in a container: deadline, capped output, and a kill that leaves nothing behind.

Every command runs in its own process group inside the container; a command that outlives
its timeout has that whole group killed (from the host, then inside the container, where
every process carrying the command's marker variable dies too), so the container stays
usable and nothing keeps running. Output is streamed and capped (head + tail kept), so a
runaway `cat` cannot exhaust the server's memory; invalid UTF-8 is replaced, never an error.
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
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

from swe_rl.fleet.output import HeadTailBuffer

log = logging.getLogger("swe_exec_server")

TIMEOUT_RETURNCODE = 124  # GNU timeout's convention


def decode_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- docker exec


@dataclass
class CommandOutcome:
    returncode: int
    output: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    output_bytes: int
    duration: float
    stderr_truncated: bool = False


# The command runs under bash when the image has it (sh otherwise), exec'd in
# place so a trivial command costs no extra process. docker exec makes it a
# session and process-group leader. Every process it starts inherits the
# marker variable, which is how a timeout finds them all inside the container,
# even those that left the process group.
MARKER_VAR = "SWE_RL_EXEC_TAG"
_WRAPPER = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; else exec sh -c "$0"; fi'
# Run inside the container on a timeout ($0 tag, $1 the command's start in clock ticks since boot or
# empty, $2 its age in ticks, $3 the tags of the other commands running in the container and of the
# killers, space-separated). It kills every process carrying the tag, and every process without the
# tag of another running command (no tag, or a stale or forged one) that started after the command
# did and descends from no other running command: so `env -i setsid`, double forks and the like die
# with their command, while a command running beside it and what earlier commands left survive.
_KILLER = r"""
tag=$0 cutoff=$1 age=$2 keep=$3
read -r up _ < /proc/uptime; up=${up%%.*}${up#*.}; fallback=$((up - age))
procs() {
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    read -r st < "$d/stat" 2>/dev/null || continue
    st=${st##*) }
    set -- $st
    [ "$1" = Z ] && continue
    e=$(tr '\000' '\n' < "$d/environ" 2>/dev/null | grep '^SWE_RL_EXEC_TAG=')
    v=${e#SWE_RL_EXEC_TAG=}
    if [ -z "$e" ]; then c=2
    elif [ "$v" = "$tag" ]; then c=0
    else case " $keep " in *" $v "*) c=1 ;; *) c=2 ;; esac
    fi
    echo "$p $2 ${20} $c"
  done
}
doomed() {
if command -v awk >/dev/null 2>&1; then
  procs | awk -v cutoff="$cutoff" -v fallback="$fallback" '
    { pp[$1] = $2; st[$1] = $3; c[$1] = $4; if ($4 == 0 && (low == "" || $3 < low)) low = $3 }
    END {
      if (cutoff == "") cutoff = (low != "") ? low : fallback
      for (p in c) {
        if (c[p] == 0) { print p; continue }
        if (c[p] != 2 || st[p] + 0 < cutoff + 0) continue
        q = pp[p]; n = 0; safe = 0
        while ((q in c) && n++ < 4096) { if (c[q] == 1) { safe = 1; break }; if (c[q] == 0) break; q = pp[q] }
        if (!safe) print p
      }
    }'
else
  procs | while read -r p _ _ c; do [ "$c" = 0 ] && echo "$p"; done
fi
}
# Again while a pass finds something: a process may fork between being listed and being killed.
n=0
while [ $n -lt 5 ]; do
  [ -n "$(doomed | while read -r p; do kill -9 "$p" 2>/dev/null && echo "$p"; done)" ] || break
  n=$((n + 1))
done
exit 0
"""


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
        env: dict[str, str] | None,
        max_output: int,
        merge_stderr: bool = True,
        user: str | None = None,
    ) -> CommandOutcome:
        tag = secrets.token_hex(8)
        start = time.monotonic()
        self._running[tag] = (container_id, start)
        exec_id = self.api.exec_create(
            container_id,
            ["/bin/sh", "-c", _WRAPPER, command],
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
        is exhausted), then from inside the container (`_KILLER`), which also
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
        if host_pid > 0 and _pid_in_container(host_pid, container_id):
            cutoff = _start_ticks(host_pid)
            try:
                os.killpg(host_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        with self._kill_locks[hash(container_id) % len(self._kill_locks)]:
            self._kill_inside(container_id, tag, kill_tag, cutoff, started)

    def _kill_inside(self, container_id: str, tag: str, kill_tag: str, cutoff: str, started: float) -> None:
        age = int((time.monotonic() - started) * _TICKS) + _TICKS // 5  # a little before the start
        self._running[kill_tag] = (container_id, time.monotonic())
        keep = " ".join(t for t, (cid, _) in list(self._running.items()) if cid == container_id and t != tag)
        try:
            kill_id = self.api.exec_create(
                container_id,
                ["/bin/sh", "-c", _KILLER, tag, cutoff, str(age), keep],
                environment={MARKER_VAR: kill_tag},
                user="0",
            )["Id"]  # whoever ran it
            self.api.exec_start(kill_id)
        except docker.errors.APIError as exc:  # container died meanwhile: nothing left to kill
            log.warning("kill of timed-out command in %s failed: %s", container_id[:12], exc)
        finally:
            self._running.pop(kill_tag, None)


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _start_ticks(pid: int) -> str:
    """Start of a host process in clock ticks since boot (the same clock inside its container), or ''."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _pid_in_container(pid: int, container_id: str) -> bool:
    """True when host `pid` is a process of that container (guards against PID reuse and other namespaces)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            return container_id in fh.read()
    except OSError:
        return False
