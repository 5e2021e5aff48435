"""Exec server: owns the task containers of one Docker node.

Runs on every Docker node (systemd unit `server/swe-exec-server.service`, port
5000). It deploys alone: it needs Flask, waitress and the Docker SDK, nothing of
`swe_rl`. The pool server on the GPU head node is its only normal caller.

Why it is built this way:
- Docker is driven through the SDK over its socket (no `docker` CLI processes).
- Every command runs in its own process group inside the container; a command
  that outlives its timeout has that whole group killed (from the host, then
  inside the container, where every process carrying the command's marker
  variable dies too), so the container stays usable and nothing keeps running.
- Output is streamed and capped (head + tail kept), so a runaway `cat` cannot
  exhaust the server's memory; invalid UTF-8 is replaced, never an error.
- Containers carry labels (managed-by, server id, lease id, owner, deadline,
  idle TTL). A reaper removes this server's containers that are past their
  deadline or idle too long; it never touches anything it does not manage.
- Every endpoint but `/healthz` needs the bearer token; bad input gets a 4xx
  with a JSON error, and a failed create removes what it started.
- Warm pools: `POST /warm` sets a target of pre-started containers for one
  exact create request (image and limits); a background refiller keeps it
  filled within bounds (`max_warm`, `max_containers`, a free-memory floor), and
  a matching create claims one with no Docker call. Labels cannot change, so a
  claimed container's lease lives in memory and in a small state file; a
  restart adopts claimed ones and destroys unclaimed ones, a graceful stop
  destroys the unclaimed ones, and the reaper expires them past their TTL.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import io
import json
import logging
import os
import re
import secrets
import signal
import socket
import struct
import tarfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import docker
import docker.errors
from flask import Flask, g, jsonify, request
from werkzeug.exceptions import HTTPException

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.checks import BadRequest, parse_body, scrub

__version__ = "0.1.0"
log = logging.getLogger("swe_exec_server")

LABEL_MANAGED = "swe-rl.managed-by"
LABEL_SERVER = "swe-rl.exec-server"
LABEL_LEASE = "swe-rl.lease-id"
LABEL_OWNER = "swe-rl.owner"
LABEL_DEADLINE = "swe-rl.deadline"
LABEL_IDLE_TTL = "swe-rl.idle-ttl"
LABEL_CREATED = "swe-rl.created"
LABEL_WARM = "swe-rl.warm"
MANAGED_VALUE = "swe-rl"

CONTAINER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:@/+-]{0,128}$")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,255}$")
MEMORY_RE = re.compile(r"^[0-9]+[bkmgBKMG]?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
SCRATCH = "/tmp/.swe-rl"  # server-side files inside the container (never under the workdir)
TIMEOUT_RETURNCODE = 124  # GNU timeout's convention
_PATH_REFUSED = re.compile(r"too many (levels of symbolic )?links|not a directory|no such file", re.I)
MAX_SYMLINKS = 40  # as the kernel's own limit when resolving a path
# A start the runtime refuses because of what the request asked for (workdir, limits), not a broken node.
_START_REFUSED = re.compile(r"OCI runtime create failed|error during container init|not a directory|"
                            r"no such file or directory|invalid argument|permission denied", re.I)


# --------------------------------------------------------------------------- config


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass
class ExecConfig:
    """Exec server settings; each field can be set by an `SWE_EXEC_*` variable or a flag."""

    host: str = "127.0.0.1"
    """Address to bind. Loopback unless told otherwise: nothing is open by default."""
    port: int = 5000
    token: str = field(default="", repr=False)
    """Bearer token required on every endpoint but /healthz."""
    server_id: str = field(default_factory=socket.gethostname)
    """Name of this node; containers are labelled with it and the reaper only touches its own."""
    max_containers: int = 32
    """Managed containers this node holds at most; create answers 429 past it."""
    memory: str = "4g"
    """Default memory limit per container (no swap beyond it)."""
    cpus: float = 2.0
    """Default CPU limit per container."""
    pids_limit: int = 1024
    """Default process limit per container (fork bombs stop there)."""
    max_output_bytes: int = 1 << 20
    """Output kept per exec: head and tail halves with a marker in between."""
    max_eval_output_bytes: int = 16 << 20
    """Output kept for an evaluation's test log."""
    max_file_bytes: int = 64 << 20
    """Largest file read_file returns."""
    max_body_bytes: int = 96 << 20
    """Largest request body accepted (413 past it)."""
    default_timeout: float = 180.0
    """Command timeout when the request gives none."""
    max_timeout: float = 4 * 3600.0
    """Longest timeout a request may ask for."""
    idle_ttl: float = 1800.0
    """A container with no call and no touch for this long is reaped (pool death backstop)."""
    max_lifetime: float = 12 * 3600.0
    """Hard deadline after creation; also the upper bound of a request's ttl."""
    reap_interval: float = 30.0
    threads: int = 128
    """WSGI worker threads: long calls (an evaluation) each hold one."""
    allow_pull: bool = False
    """Pull images that are missing locally (off: a missing image is a clear 404)."""
    allow_network: bool = True
    """Whether a create request may ask for Docker's default (bridge) network."""
    networks: tuple[str, ...] = ()
    """Named Docker networks a create request may ask for (e.g. an internal no-egress one for tests)."""
    keepalive_command: tuple[str, ...] = ("sleep", "infinity")
    max_warm: int = 8
    """Warm (started, unclaimed) containers this node holds at most; they also count against max_containers."""
    warm_min_free_memory: str = "2g"
    """Warm containers are started only while the node's MemAvailable stays above this."""
    warm_ttl: float = 600.0
    """Default lifetime of a /warm target and of each warm container (a request may ask up to max_lifetime)."""
    warm_parallel: int = 4
    """Warm containers being started at once (keeps the Docker daemon responsive)."""
    warm_burst_window: float = 10.0
    """Claims of the last this many seconds raise a warm target to twice their number (at most max_warm),
    so the refill keeps up with back-to-back allocations; 0 keeps targets as asked."""
    warm_max_failures: int = 3
    """A warm spec whose start fails this many times in a row is dropped (at once when Docker refuses it)."""
    warm_interval: float = 1.0
    """Seconds between refill passes (a claim or a /warm call wakes the refiller at once)."""
    state_dir: str = "~/.cache/swe-rl/exec-state"
    """Where the state file of claimed warm containers (lease id, owner, deadline) lives."""
    backend: str = "docker"
    """`docker`; `memory` is an in-memory fake for load tests only (no containers at all)."""

    @classmethod
    def from_env(cls) -> "ExecConfig":
        cfg = cls()
        cfg.host = _env("SWE_EXEC_HOST", cfg.host)
        cfg.port = int(_env("SWE_EXEC_PORT", str(cfg.port)))
        cfg.token = _read_token(os.environ.get("SWE_EXEC_TOKEN", ""), os.environ.get("SWE_EXEC_TOKEN_FILE", ""))
        cfg.server_id = _env("SWE_EXEC_SERVER_ID", cfg.server_id)
        cfg.max_containers = int(_env("SWE_EXEC_MAX_CONTAINERS", str(cfg.max_containers)))
        cfg.memory = _env("SWE_EXEC_MEMORY", cfg.memory)
        cfg.cpus = float(_env("SWE_EXEC_CPUS", str(cfg.cpus)))
        cfg.pids_limit = int(_env("SWE_EXEC_PIDS_LIMIT", str(cfg.pids_limit)))
        cfg.max_output_bytes = int(_env("SWE_EXEC_MAX_OUTPUT_BYTES", str(cfg.max_output_bytes)))
        cfg.max_eval_output_bytes = int(_env("SWE_EXEC_MAX_EVAL_OUTPUT_BYTES", str(cfg.max_eval_output_bytes)))
        cfg.max_file_bytes = int(_env("SWE_EXEC_MAX_FILE_BYTES", str(cfg.max_file_bytes)))
        cfg.max_body_bytes = int(_env("SWE_EXEC_MAX_BODY_BYTES", str(cfg.max_body_bytes)))
        cfg.default_timeout = float(_env("SWE_EXEC_DEFAULT_TIMEOUT", str(cfg.default_timeout)))
        cfg.max_timeout = float(_env("SWE_EXEC_MAX_TIMEOUT", str(cfg.max_timeout)))
        cfg.idle_ttl = float(_env("SWE_EXEC_IDLE_TTL", str(cfg.idle_ttl)))
        cfg.max_lifetime = float(_env("SWE_EXEC_MAX_LIFETIME", str(cfg.max_lifetime)))
        cfg.reap_interval = float(_env("SWE_EXEC_REAP_INTERVAL", str(cfg.reap_interval)))
        cfg.threads = int(_env("SWE_EXEC_THREADS", str(cfg.threads)))
        cfg.allow_pull = _env("SWE_EXEC_ALLOW_PULL", "0") == "1"
        cfg.allow_network = _env("SWE_EXEC_ALLOW_NETWORK", "1") == "1"
        cfg.networks = tuple(n.strip() for n in _env("SWE_EXEC_NETWORKS", "").split(",") if n.strip())
        cfg.max_warm = int(_env("SWE_EXEC_MAX_WARM", str(cfg.max_warm)))
        cfg.warm_min_free_memory = _env("SWE_EXEC_WARM_MIN_FREE_MEMORY", cfg.warm_min_free_memory)
        cfg.warm_ttl = float(_env("SWE_EXEC_WARM_TTL", str(cfg.warm_ttl)))
        cfg.warm_parallel = int(_env("SWE_EXEC_WARM_PARALLEL", str(cfg.warm_parallel)))
        cfg.warm_interval = float(_env("SWE_EXEC_WARM_INTERVAL", str(cfg.warm_interval)))
        cfg.warm_burst_window = float(_env("SWE_EXEC_WARM_BURST_WINDOW", str(cfg.warm_burst_window)))
        cfg.warm_max_failures = int(_env("SWE_EXEC_WARM_MAX_FAILURES", str(cfg.warm_max_failures)))
        cfg.state_dir = _env("SWE_EXEC_STATE_DIR", cfg.state_dir)
        cfg.backend = _env("SWE_EXEC_BACKEND", cfg.backend)
        return cfg


def parse_bytes(value: str | int) -> int:
    """'4g', '512m', '100k' or a byte count as bytes (binary units, as Docker reads them)."""
    text = str(value).strip().lower()
    if not MEMORY_RE.match(text):
        raise ValueError(f"not a size: {value!r}")
    unit = text[-1] if text[-1] in "bkmg" else ""
    number = int(text[:-1] if unit else text)
    return number * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]


def node_memory() -> tuple[int, int]:
    """(MemTotal, MemAvailable) of this node in bytes, (0, 0) when /proc/meminfo cannot be read."""
    total = available = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return total, available


def _read_token(token: str, token_file: str) -> str:
    if token:
        return token.strip()
    if token_file:
        with open(token_file, encoding="utf-8") as fh:
            return fh.read().strip()
    return ""


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An error with an HTTP status and a message the caller can act on."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


# --------------------------------------------------------------------------- output capture


class HeadTailBuffer:
    """Keeps the first and last `limit / 2` bytes of a stream, counting what it drops.

    Memory stays bounded whatever the command prints.
    """

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_limit + self.tail_limit

    def getvalue(self) -> bytes:
        if not self.truncated:
            return bytes(self.head + self.tail)
        tail = self.tail[-self.tail_limit :] if self.tail_limit else b""
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n\n[... {dropped} bytes of output truncated ...]\n\n".encode()
        return bytes(self.head) + marker + bytes(tail)


def decode_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- docker exec


@dataclass
class ExecResult:
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
    ) -> ExecResult:
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
        return ExecResult(
            returncode=returncode,
            output=out.getvalue(),
            stderr=b"" if merge_stderr else err.getvalue(),
            timed_out=timed_out,
            truncated=out.truncated,
            output_bytes=out.total,
            duration=time.monotonic() - start,
            stderr_truncated=err is not out and err.truncated,
        )

    def _pump(self, raw: socket.socket, out: HeadTailBuffer, err: HeadTailBuffer,
              deadline: float, container_id: str, tag: str, exec_id: str) -> bool:
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
                threading.Thread(target=self.kill_group, args=(container_id, tag, exec_id), daemon=True).start()
                hard_stop = time.monotonic() + 5.0  # let the stream close after the kill
            if hard_stop is not None and now >= hard_stop:
                break  # something outside the group holds the stream open: abandon it
            try:
                chunk = raw.recv(65536)
            except (socket.timeout, BlockingIOError):
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
            kill_id = self.api.exec_create(container_id, ["/bin/sh", "-c", _KILLER, tag, cutoff, str(age), keep],
                                           environment={MARKER_VAR: kill_tag}, user="0")["Id"]  # whoever ran it
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


# --------------------------------------------------------------------------- containers


@dataclass
class ContainerRecord:
    id: str
    name: str
    image: str
    lease_id: str
    owner: str
    workdir: str
    created: float
    deadline: float
    idle_ttl: float
    last_activity: float
    in_flight: int = 0
    warm: bool = False
    """Started ahead and not claimed yet: no lease, evictable, destroyed on stop."""
    from_warm: bool = False
    """Claimed from the warm pool: its labels carry no lease, the state file does."""
    baseline: bool = False
    """An episode-start baseline was recorded: diffs leave out what was there before."""

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        d["idle_seconds"] = round(time.time() - self.last_activity, 3)
        return d

    def lease_state(self) -> dict[str, Any]:
        return {"lease_id": self.lease_id, "owner": self.owner, "deadline": self.deadline,
                "idle_ttl": self.idle_ttl, "created": self.created, "workdir": self.workdir, "image": self.image}


@dataclass(frozen=True)
class CreateSpec:
    """Everything a container gets from a create request: a warm one must match it exactly to be claimed."""

    image: str
    memory: str
    cpus: float
    pids_limit: int
    network: bool | str
    """False: none; True: Docker's default network; a name: that (allowlisted) Docker network."""
    workdir: str
    env: tuple[tuple[str, str], ...]

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.image, parse_bytes(self.memory), self.cpus, self.pids_limit, self.network, self.workdir,
                self.env)


@dataclass
class WarmTarget:
    spec: CreateSpec
    count: int
    ttl: float
    expires: float
    retry_at: float = 0.0
    """After a failed start, no new start for this key before then."""
    last_error: str = ""
    failures: int = 0
    """Failed starts in a row."""


@dataclass(eq=False)
class WarmStart:
    """A warm container being started; a create may be promised it before it is up."""

    spec: CreateSpec
    deadline: float
    ttl: float
    promised: bool = False
    abandoned: bool = False
    rec: ContainerRecord | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ContainerManager:
    """The node's managed containers: create, exec, files, evaluate, destroy, reap, warm pools."""

    def __init__(self, config: ExecConfig, client: Any = None) -> None:
        self.config = config
        self.client = client or docker.from_env(max_pool_size=max(16, config.threads), timeout=600)
        make_executor = getattr(self.client, "make_executor", None)  # the in-memory backend brings its own
        self.executor = make_executor() if make_executor else DockerExecutor(self.client)
        self._lock = threading.Lock()
        self._records: dict[str, ContainerRecord] = {}
        self._reserved = 0
        self._creating: set[str] = set()
        """Names of containers being created: the reaper leaves them alone."""
        self._stop = threading.Event()
        self._stopping = False
        self._reaper: threading.Thread | None = None
        self._targets: dict[tuple[Any, ...], WarmTarget] = {}
        self._ready: dict[tuple[Any, ...], list[str]] = {}
        """Warm container ids per key, oldest first."""
        self._starting: dict[tuple[Any, ...], list[WarmStart]] = {}
        self._warm_wake = threading.Event()
        self._refiller: threading.Thread | None = None
        self._warm_pool: Any = None
        self._state_lock = threading.Lock()
        self.warm_stats = {"claimed": 0, "promised": 0, "cold": 0, "started": 0, "evicted": 0, "expired": 0,
                           "failed": 0, "dropped": 0}
        self._claims: dict[tuple[Any, ...], list[float]] = {}
        """Times of recent creates per key (claimed or not): the demand the refill keeps up with."""
        self._dropped: dict[tuple[Any, ...], dict[str, Any]] = {}
        """Warm specs dropped after failed starts: a /warm for them is declined until a cold create succeeds."""
        self.min_free_memory = parse_bytes(config.warm_min_free_memory)
        try:  # Docker's data root, scrubbed from the messages we pass on
            self._docker_root = str(self.client.info().get("DockerRootDir") or "")
        except Exception:  # noqa: BLE001 - a fake backend or an old daemon: the default paths still go
            self._docker_root = ""
        self.load_existing()

    def scrub(self, text: str) -> str:
        return scrub(text, (self._docker_root,))

    # ---- registry

    def _label_filter(self) -> dict[str, list[str]]:
        return {"label": [f"{LABEL_MANAGED}={MANAGED_VALUE}", f"{LABEL_SERVER}={self.config.server_id}"]}

    def load_existing(self) -> None:
        """Adopt this server's containers left from an earlier run (fresh idle window).

        Warm containers are adopted only when the state file says they were claimed (with
        their lease); unclaimed ones are destroyed: nothing warm outlives the server.
        """
        now = time.time()
        state = self._load_state()
        doomed = []
        for c in self.client.containers.list(all=True, filters=self._label_filter(), ignore_removed=True):
            labels = c.labels or {}
            image = c.image.tags[0] if c.image and c.image.tags else ""
            workdir = c.attrs.get("Config", {}).get("WorkingDir") or "/"
            if labels.get(LABEL_WARM) == "1":
                info = state.get(c.id)
                if not isinstance(info, dict):
                    doomed.append(c.id)
                    continue
                rec = ContainerRecord(
                    id=c.id, name=c.name, image=str(info.get("image") or image),
                    lease_id=str(info.get("lease_id", "")), owner=str(info.get("owner", "")),
                    workdir=str(info.get("workdir") or workdir), created=float(info.get("created", now)),
                    deadline=float(info.get("deadline", now)),
                    idle_ttl=float(info.get("idle_ttl", self.config.idle_ttl)), last_activity=now, from_warm=True)
            else:
                rec = ContainerRecord(
                    id=c.id, name=c.name, image=image,
                    lease_id=labels.get(LABEL_LEASE, ""), owner=labels.get(LABEL_OWNER, ""), workdir=workdir,
                    created=float(labels.get(LABEL_CREATED, now)), deadline=float(labels.get(LABEL_DEADLINE, now)),
                    idle_ttl=float(labels.get(LABEL_IDLE_TTL, self.config.idle_ttl)), last_activity=now,
                )
            with self._lock:
                self._records[c.id] = rec
        for cid in doomed:
            log.info("destroying unclaimed warm container %s left from an earlier run", cid[:12])
            self._docker_remove(cid)
        self._save_state()

    def lookup(self, container_id: Any) -> ContainerRecord:
        if not isinstance(container_id, str) or not CONTAINER_ID_RE.match(container_id):
            raise ApiError(400, "container_id must be a container id or name (letters, digits, '_', '.', '-')")
        with self._lock:
            rec = self._records.get(container_id)
            if rec is None:
                for r in self._records.values():
                    if r.name == container_id or (len(container_id) >= 12 and r.id.startswith(container_id)):
                        rec = r
                        break
        if rec is None or rec.warm:
            raise ApiError(404, f"unknown container {container_id!r}: not managed by this exec server")
        return rec

    def count(self) -> int:
        with self._lock:
            return len(self._records) + self._reserved

    def leased_count(self) -> int:
        """Containers that are not warm (leased, or being created cold)."""
        with self._lock:
            starting = sum(len(v) for v in self._starting.values())
            return sum(1 for r in self._records.values() if not r.warm) + self._reserved - starting

    def records(self) -> list[ContainerRecord]:
        with self._lock:
            return list(self._records.values())

    def touch(self, ids: list[str]) -> tuple[list[str], list[str]]:
        now = time.time()
        touched, missing = [], []
        with self._lock:
            for cid in ids:
                rec = self._records.get(cid)
                if rec is None or rec.warm:
                    missing.append(cid)
                else:
                    rec.last_activity = now
                    touched.append(cid)
        return touched, missing

    class _Use:
        """Marks a container busy for the reaper while a call runs on it."""

        def __init__(self, mgr: "ContainerManager", rec: ContainerRecord) -> None:
            self.mgr, self.rec = mgr, rec

        def __enter__(self) -> ContainerRecord:
            with self.mgr._lock:
                self.rec.in_flight += 1
                self.rec.last_activity = time.time()
            return self.rec

        def __exit__(self, *exc: Any) -> None:
            with self.mgr._lock:
                self.rec.in_flight -= 1
                self.rec.last_activity = time.time()

    def use(self, container_id: Any) -> "ContainerManager._Use":
        return ContainerManager._Use(self, self.lookup(container_id))

    # ---- create / destroy

    def _spec(self, body: dict[str, Any]) -> CreateSpec:
        cfg = self.config
        image = _require_str(body, "image")
        if not IMAGE_RE.match(image):
            raise ApiError(400, f"invalid image name {image!r}")
        workdir = _opt_workdir(body)
        network = _opt_network(body, cfg)
        memory = body.get("memory", cfg.memory)
        if isinstance(memory, bool) or not isinstance(memory, (str, int)) or not MEMORY_RE.match(str(memory)):
            raise ApiError(400, "memory must look like '4g', '512m' or a byte count")
        if "memory" in body:
            _check_memory(str(memory))
        cpus = _opt_number(body, "cpus", cfg.cpus, lo=0.01, hi=float(os.cpu_count() or 1))
        pids = int(_opt_number(body, "pids_limit", cfg.pids_limit, lo=16, hi=1 << 20, integer=True))
        env = _opt_env(body)
        return CreateSpec(image, str(memory), cpus, pids, network, workdir, tuple(sorted(env.items())))

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        spec = self._spec(body)
        lease_id = _opt_label(body, "lease_id")
        owner = _opt_label(body, "owner")
        ttl = _opt_number(body, "ttl", cfg.max_lifetime, lo=1, hi=cfg.max_lifetime)
        idle_ttl = _opt_number(body, "idle_ttl", cfg.idle_ttl, lo=1, hi=cfg.max_lifetime)
        rec = self._claim_warm(spec, lease_id, owner, ttl, idle_ttl)
        warm = rec is not None
        if rec is None:
            rec = self._create_cold(spec, lease_id, owner, ttl, idle_ttl)
            if self._dropped:
                with self._lock:
                    self._dropped.pop(spec.key, None)  # it starts after all: warming it may be asked again
        return {"container_id": rec.id, "name": rec.name, "image": rec.image, "workdir": rec.workdir,
                "deadline": rec.deadline, "network": spec.network, "warm": warm}

    def _create_cold(self, spec: CreateSpec, lease_id: str, owner: str, ttl: float,
                     idle_ttl: float) -> ContainerRecord:
        cfg = self.config
        victim = None
        with self._lock:
            if len(self._records) + self._reserved >= cfg.max_containers:
                victim = self._evictable_locked()
                if victim is None:
                    raise ApiError(429, f"node full: {cfg.max_containers} containers", capacity=cfg.max_containers)
                self._forget_locked(victim)
            self._reserved += 1
            self.warm_stats["cold"] += 1
        try:
            if victim is not None:  # a lease matters more than a warm container nobody claimed yet
                self.warm_stats["evicted"] += 1
                log.info("evicting warm container %s (%s) to make room", victim.id[:12], victim.image)
                self._docker_remove(victim.id)
            now = time.time()
            labels = {LABEL_LEASE: lease_id, LABEL_OWNER: owner, LABEL_DEADLINE: f"{now + ttl:.3f}",
                      LABEL_IDLE_TTL: f"{idle_ttl:.3f}"}
            container = self._start_container(spec, labels, now)
            rec = ContainerRecord(
                id=container.id, name=container.name, image=spec.image, lease_id=lease_id, owner=owner,
                workdir=spec.workdir, created=now, deadline=now + ttl, idle_ttl=idle_ttl, last_activity=now,
            )
            with self._lock:
                self._records[container.id] = rec
            return rec
        finally:
            with self._lock:
                self._reserved -= 1

    def _start_container(self, spec: CreateSpec, labels: dict[str, str], now: float) -> Any:
        """docker create + start with the spec's limits; nothing half-created stays behind."""
        cfg = self.config
        self._ensure_image(spec.image)
        labels = {LABEL_MANAGED: MANAGED_VALUE, LABEL_SERVER: cfg.server_id, LABEL_CREATED: f"{now:.3f}", **labels}
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"swe-{cfg.server_id[:20]}-{secrets.token_hex(6)}")
        with self._lock:
            self._creating.add(name)
        container = None
        try:
            container = self.client.containers.create(
                spec.image, command=list(cfg.keepalive_command), name=name, labels=labels, detach=True,
                init=True, working_dir=spec.workdir, environment=dict(spec.env) or None,
                mem_limit=spec.memory, memswap_limit=spec.memory, nano_cpus=int(spec.cpus * 1e9),
                pids_limit=spec.pids_limit, network_mode=self._network_mode(spec.network),
                security_opt=["no-new-privileges"],
            )
            container.start()
            return container
        except docker.errors.APIError as exc:
            reason = self.scrub(str(exc.explanation or exc))
            # The daemon refusing this create (a limit, a workdir through a file, ...) is the request's
            # fault; a daemon that fails otherwise is the node's.
            if exc.status_code == 400 or _START_REFUSED.search(reason):
                self._remove_half_created(container)
                raise ApiError(400, f"docker refused this container: {reason}", reason=reason) from None
            self._remove_half_created(container)
            raise
        except BaseException:
            if container is not None:
                try:
                    container.remove(force=True)
                except docker.errors.APIError:
                    log.exception("could not remove half-created container %s", container.id[:12])
            raise
        finally:
            with self._lock:
                self._creating.discard(name)

    def _network_mode(self, network: bool | str) -> str | None:
        if network is False:
            return "none"
        if network is True:
            return None  # Docker's default bridge
        try:
            self.client.networks.get(network)
        except docker.errors.NotFound:
            raise ApiError(404, f"network {network!r} not found on this node (SWE_EXEC_NETWORKS names it; "
                                f"create it with `docker network create --internal {network}`)",
                           network=network, network_missing=True) from None
        return network

    def _remove_half_created(self, container: Any) -> None:
        if container is None:
            return
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            log.exception("could not remove half-created container %s", container.id[:12])

    def _ensure_image(self, image: str) -> None:
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            if not self.config.allow_pull:
                raise ApiError(404, f"image not found on this node: {image}", image=image) from None
            try:
                self.client.images.pull(image)
            except docker.errors.APIError as exc:
                raise ApiError(404, f"image not found and pull failed: {image}: {exc.explanation}") from None

    def destroy(self, container_id: Any) -> dict[str, Any]:
        rec = self.lookup(container_id)
        self._remove(rec.id)
        return {"ok": True, "container_id": rec.id}

    def _forget_locked(self, rec: ContainerRecord) -> None:
        self._records.pop(rec.id, None)
        if rec.warm:
            for ids in self._ready.values():
                if rec.id in ids:
                    ids.remove(rec.id)

    def _docker_remove(self, cid: str) -> None:
        try:
            self.client.api.remove_container(cid, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # e.g. removal already in progress; the reaper retries
            log.warning("could not remove %s: %s", cid[:12], exc)

    def _remove(self, cid: str) -> None:
        with self._lock:
            rec = self._records.get(cid)
            if rec is not None:
                self._forget_locked(rec)
        self._docker_remove(cid)
        if rec is not None and rec.from_warm:
            self._save_state()

    def destroy_all(self) -> int:
        n = 0
        for rec in self.records():
            self._remove(rec.id)
            n += 1
        return n

    # ---- warm pools

    def warm(self, body: dict[str, Any]) -> dict[str, Any]:
        """Set the warm target of one exact create request: `count` started containers kept until `ttl`."""
        cfg = self.config
        spec = self._spec(body)
        count = int(_opt_number(body, "count", 1, lo=0, hi=1 << 16, integer=True))
        ttl = _opt_number(body, "ttl", cfg.warm_ttl, lo=1, hi=cfg.max_lifetime)
        if count > 0:
            self._ensure_image(spec.image)  # a clear 404 now rather than failed starts later
        with self._lock:
            if self._stopping:
                raise ApiError(503, "exec server is stopping")
            dropped = self._dropped.get(spec.key)
            if dropped is not None and dropped["until"] <= time.time():
                del self._dropped[spec.key]
                dropped = None
            if count == 0 or dropped is not None:
                self._targets.pop(spec.key, None)
            else:
                self._targets[spec.key] = WarmTarget(spec, min(count, cfg.max_warm), ttl, time.time() + ttl)
            ready = len(self._ready.get(spec.key, []))
            starting = len(self._starting.get(spec.key, []))
        self._warm_wake.set()
        if dropped is not None:
            return {"ok": True, "image": spec.image, "count": count, "accepted": 0, "ttl": ttl, "ready": ready,
                    "starting": starting, "max_warm": cfg.max_warm, "dropped": dropped["reason"]}
        return {"ok": True, "image": spec.image, "count": count, "accepted": min(count, cfg.max_warm), "ttl": ttl,
                "ready": ready, "starting": starting, "max_warm": cfg.max_warm}

    def _claim_warm(self, spec: CreateSpec, lease_id: str, owner: str, ttl: float,
                    idle_ttl: float) -> ContainerRecord | None:
        """Take a ready warm container of this exact spec, or one being started (never slower than a cold start)."""
        key = spec.key
        now = time.time()
        rec: ContainerRecord | None = None
        start: WarmStart | None = None
        with self._lock:
            if self.config.warm_burst_window > 0:
                self._claims.setdefault(key, []).append(now)
            ids = self._ready.get(key)
            while ids and rec is None:
                cand = self._records.get(ids.pop(0))
                if cand is not None and cand.warm and cand.deadline > now + 5:  # never one about to expire
                    rec = cand
            if rec is None:
                start = next((s for s in self._starting.get(key, []) if not s.promised), None)
                if start is not None:
                    start.promised = True
        if rec is None and start is not None:
            start.done.wait(300.0)
            with self._lock:
                rec = start.rec
                if rec is None:
                    start.abandoned = True  # if it comes up after all, it goes to the ready list
                else:
                    self.warm_stats["promised"] += 1
        if rec is None:
            return None
        now = time.time()
        with self._lock:
            rec.warm, rec.from_warm = False, True
            rec.lease_id, rec.owner, rec.created = lease_id, owner, now
            rec.deadline, rec.idle_ttl, rec.last_activity = now + ttl, idle_ttl, now
            self.warm_stats["claimed"] += 1
        self._save_state()
        self._warm_wake.set()  # refill behind the claim
        return rec

    def _evictable_locked(self) -> ContainerRecord | None:
        """The oldest ready warm container of the key with the most ready ones."""
        best = max(self._ready.values(), key=len, default=[])
        for cid in best:
            rec = self._records.get(cid)
            if rec is not None and rec.warm:
                return rec
        return None

    def warm_counts(self) -> dict[str, Any]:
        with self._lock:
            ready: dict[str, int] = {}
            for r in self._records.values():
                if r.warm:
                    ready[r.image] = ready.get(r.image, 0) + 1
            starting = sum(len(v) for v in self._starting.values())
            return {"warm": ready, "warm_total": sum(ready.values()), "warm_starting": starting}

    def warm_targets(self) -> list[dict[str, Any]]:
        now = time.time()
        with self._lock:
            return [{"image": t.spec.image, "memory": t.spec.memory, "cpus": t.spec.cpus,
                     "pids_limit": t.spec.pids_limit, "network": t.spec.network, "workdir": t.spec.workdir,
                     "count": t.count, "ready": len(self._ready.get(k, [])),
                     "starting": len(self._starting.get(k, [])), "expires_in": round(t.expires - now, 3),
                     "last_error": t.last_error} for k, t in self._targets.items()]

    def memory_ok(self) -> bool:
        total, available = node_memory()
        return total == 0 or available > self.min_free_memory

    def refill_once(self) -> int:
        """Start warm containers up to each target, within every bound; returns how many were started."""
        cfg = self.config
        now = time.time()
        if cfg.max_warm <= 0:
            return 0
        memory_ok = None
        starts: list[WarmStart] = []
        with self._lock:
            for key in [k for k, t in self._targets.items() if t.expires <= now]:
                del self._targets[key]
            for key in [k for k, c in self._claims.items() if k not in self._targets and (not c or c[-1] < now - 60)]:
                del self._claims[key]
            if self._stopping:
                return 0
            in_flight = sum(len(v) for v in self._starting.values())
            warm_total = sum(1 for r in self._records.values() if r.warm) + in_flight
            for key, target in self._targets.items():
                if target.retry_at > now:
                    continue
                have = len(self._ready.get(key, [])) + sum(1 for s in self._starting.get(key, []) if not s.promised)
                for _ in range(self._wanted_locked(key, target, now) - have):
                    if (in_flight >= cfg.warm_parallel or warm_total >= cfg.max_warm
                            or len(self._records) + self._reserved >= cfg.max_containers):
                        break
                    if memory_ok is None:
                        memory_ok = self.memory_ok()
                    if not memory_ok:
                        break
                    start = WarmStart(target.spec, now + target.ttl, target.ttl)
                    self._starting.setdefault(key, []).append(start)
                    self._reserved += 1
                    in_flight += 1
                    warm_total += 1
                    starts.append(start)
        if memory_ok is False:
            log.debug("warm refill paused: MemAvailable below %s", cfg.warm_min_free_memory)
        for start in starts:
            self._warm_executor().submit(self._start_warm, start)
        return len(starts)

    def _wanted_locked(self, key: tuple[Any, ...], target: WarmTarget, now: float) -> int:
        """The target, raised to twice the creates of the last burst window (back-to-back allocations)."""
        window = self.config.warm_burst_window
        claims = self._claims.get(key)
        if window <= 0 or not claims:
            return target.count
        while claims and claims[0] < now - window:
            claims.pop(0)
        if len(claims) < 2:  # one create is no burst
            return target.count
        return max(target.count, min(self.config.max_warm, 2 * len(claims)))

    def _warm_executor(self) -> Any:
        if self._warm_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._warm_pool = ThreadPoolExecutor(max(1, self.config.warm_parallel), thread_name_prefix="warm")
        return self._warm_pool

    def _start_warm(self, start: WarmStart) -> None:
        spec, key = start.spec, start.spec.key
        now = time.time()
        container = None
        error = ""
        refused = False
        try:
            labels = {LABEL_WARM: "1", LABEL_LEASE: "", LABEL_OWNER: "", LABEL_DEADLINE: f"{start.deadline:.3f}",
                      LABEL_IDLE_TTL: f"{start.ttl:.3f}"}
            container = self._start_container(spec, labels, now)
        except ApiError as exc:
            error, refused = exc.message, exc.status == 400  # the spec itself: it will never start
        except Exception as exc:  # noqa: BLE001 - a failed warm start must never take the refiller down
            error = f"{type(exc).__name__}: {exc}"
        doomed = False
        dropped: dict[str, Any] | None = None
        with self._lock:
            self._starting[key].remove(start)
            if not self._starting[key]:
                del self._starting[key]
            self._reserved -= 1
            target = self._targets.get(key)
            if container is None:
                self.warm_stats["failed"] += 1
                if target is not None:
                    target.retry_at, target.last_error = time.time() + 10.0, error
                    target.failures += 1
                    if refused or target.failures >= self.config.warm_max_failures:
                        dropped = self._drop_target_locked(key, target)
            elif self._stopping:
                doomed = True
            else:
                if target is not None:
                    target.failures = 0
                self.warm_stats["started"] += 1
                rec = ContainerRecord(
                    id=container.id, name=container.name, image=spec.image, lease_id="", owner="",
                    workdir=spec.workdir, created=now, deadline=start.deadline, idle_ttl=start.ttl,
                    last_activity=now, warm=True)
                self._records[container.id] = rec
                if start.promised and not start.abandoned:
                    start.rec = rec  # handed straight to the create waiting for it
                else:
                    self._ready.setdefault(key, []).append(container.id)
        if dropped is not None:
            log.warning("warm spec of %s dropped after %d failed start(s): %s", spec.image, dropped["failures"],
                        error)
        elif error:
            log.debug("warm start of %s failed: %s", spec.image, error)
        if doomed:
            self._docker_remove(container.id)
        start.done.set()
        self._warm_wake.set()

    def _drop_target_locked(self, key: tuple[Any, ...], target: WarmTarget) -> dict[str, Any]:
        """Stop refilling a spec that does not start; remembered (for /status) until its target would expire."""
        del self._targets[key]
        info = {"image": target.spec.image, "memory": target.spec.memory, "cpus": target.spec.cpus,
                "workdir": target.spec.workdir, "failures": target.failures, "reason": target.last_error,
                "at": time.time(), "until": max(target.expires, time.time() + 60.0)}
        self._dropped[key] = info
        self.warm_stats["dropped"] += 1
        return info

    def warm_dropped(self) -> list[dict[str, Any]]:
        now = time.time()
        with self._lock:
            for key in [k for k, d in self._dropped.items() if d["until"] <= now]:
                del self._dropped[key]
            return [dict(d) for d in self._dropped.values()]

    def start_refiller(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self._warm_wake.wait(self.config.warm_interval)
                self._warm_wake.clear()
                if self._stop.is_set():
                    break
                try:
                    self.refill_once()
                except Exception:  # the refiller must outlive any one bad pass
                    log.exception("warm refill pass failed")

        self._refiller = threading.Thread(target=loop, name="warm-refiller", daemon=True)
        self._refiller.start()

    def destroy_warm(self) -> int:
        """Remove every unclaimed warm container (graceful stop)."""
        with self._lock:
            doomed = [r for r in self._records.values() if r.warm]
            for rec in doomed:
                self._forget_locked(rec)
        threads = [threading.Thread(target=self._docker_remove, args=(r.id,)) for r in doomed]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return len(doomed)

    # ---- state file (claimed warm containers: their labels carry no lease)

    def _state_path(self) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", self.config.server_id)
        return os.path.join(os.path.expanduser(self.config.state_dir), f"{safe}.json")

    def _load_state(self) -> dict[str, Any]:
        try:
            with open(self._state_path(), encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable state file %s: %s", self._state_path(), exc)
            return {}
        containers = data.get("containers") if isinstance(data, dict) else None
        return containers if isinstance(containers, dict) else {}

    def _save_state(self) -> None:
        """Atomically replace the state file with the claimed warm containers (removed when there are none)."""
        path = self._state_path()
        with self._state_lock:
            with self._lock:
                entries = {r.id: r.lease_state() for r in self._records.values() if r.from_warm}
            try:
                if not entries:
                    if os.path.exists(path):
                        os.unlink(path)
                    return
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump({"server_id": self.config.server_id, "containers": entries}, fh)
                os.replace(tmp, path)
            except OSError as exc:
                log.error("could not write state file %s: %s", path, exc)

    # ---- reaping

    def reap_once(self) -> list[str]:
        """Remove this server's containers past deadline, idle too long, or dead (warm ones included)."""
        now = time.time()
        try:
            live = {c.id: c for c in self.client.containers.list(all=True, filters=self._label_filter(),
                                                                  ignore_removed=True)}
        except docker.errors.APIError as exc:
            log.warning("reaper could not list containers: %s", exc)
            return []
        doomed: list[tuple[str, str]] = []
        state_changed = False
        with self._lock:
            for cid in list(self._records):
                if cid not in live:  # removed behind our back
                    rec = self._records[cid]
                    state_changed |= rec.from_warm
                    self._forget_locked(rec)
            for cid, c in live.items():
                labels = c.labels or {}
                if labels.get(LABEL_MANAGED) != MANAGED_VALUE or labels.get(LABEL_SERVER) != self.config.server_id:
                    continue  # belt and braces: never touch what we do not manage
                if c.name in self._creating:
                    continue
                rec = self._records.get(cid)
                dead = c.status in ("exited", "dead")
                if rec is None:
                    reason = "unknown"
                else:
                    expired = now > rec.deadline
                    if rec.in_flight > 0 and not expired:
                        continue
                    idle = now - rec.last_activity > rec.idle_ttl
                    reason = ("warm expired" if expired and rec.warm else "deadline" if expired
                              else "idle" if idle else "dead" if dead else "")
                    if not reason:
                        continue
                    if rec.warm:
                        self.warm_stats["expired"] += 1
                    state_changed |= rec.from_warm
                    self._forget_locked(rec)
                doomed.append((cid, reason))
        for cid, reason in doomed:
            log.info("reaping %s (%s)", cid[:12], reason)
            self._docker_remove(cid)
        if state_changed:
            self._save_state()
        return [cid for cid, _ in doomed]

    def start_reaper(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.config.reap_interval):
                try:
                    self.reap_once()
                except Exception:  # the reaper must outlive any one bad pass
                    log.exception("reaper pass failed")

        self._reaper = threading.Thread(target=loop, name="reaper", daemon=True)
        self._reaper.start()

    def stop(self) -> int:
        """Stop background work and destroy the warm containers nobody claimed; returns how many."""
        self._stop.set()
        self._warm_wake.set()
        with self._lock:
            self._stopping = True
            self._targets.clear()
        if self._warm_pool is not None:
            self._warm_pool.shutdown(wait=True, cancel_futures=True)
        return self.destroy_warm()


    # ---- commands

    def exec(self, body: dict[str, Any]) -> dict[str, Any]:
        command = _require_str(body, "command")
        timeout = _opt_number(body, "timeout", self.config.default_timeout, lo=0.1, hi=self.config.max_timeout)
        env = _opt_env(body)
        max_out = int(_opt_number(body, "max_output_bytes", self.config.max_output_bytes, lo=64,
                                  hi=self.config.max_eval_output_bytes))
        user = _opt_user(body)
        separate = _opt_bool(body, "separate_stderr", False)  # default: one interleaved "output"
        with self.use(body.get("container_id")) as rec:
            workdir = _opt_path(body, "workdir") or rec.workdir
            res = self._run(rec, command, timeout=timeout, workdir=workdir, env=env, max_output=max_out,
                            merge_stderr=not separate, user=user)
            if (user and res.returncode == 126 and (not res.output or b"unable to find user" in res.output)
                    and not self._user_exists(rec, user)):  # Docker's exec says 126, with or without a message
                raise ApiError(422, f"no user {user!r} in the container")
        result = {
            "returncode": res.returncode, "output": decode_text(res.output), "timed_out": res.timed_out,
            "truncated": res.truncated, "output_bytes": res.output_bytes, "duration": round(res.duration, 4),
        }
        if separate:  # "output" is then stdout alone
            result.update(stderr=decode_text(res.stderr), stderr_truncated=getattr(res, "stderr_truncated", False))
        return result

    def _user_exists(self, rec: ContainerRecord, user: str) -> bool:
        name = user.split(":")[0]
        return name.isdigit() or self._run(rec, f"id -u -- {_sh_quote(name)}", timeout=30.0, workdir="/", env=None,
                                           max_output=4096).returncode == 0

    def _run(self, rec: ContainerRecord, command: str, **kw: Any) -> ExecResult:
        try:
            return self.executor.run(rec.id, command, **kw)
        except docker.errors.NotFound:
            with self._lock:
                self._forget_locked(rec)
            if rec.from_warm:
                self._save_state()
            raise ApiError(410, f"container {rec.id[:12]} no longer exists (it died or was removed)") from None
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise ApiError(409, f"container {rec.id[:12]} is not running (it died)") from None
            raise

    def diff(self, body: dict[str, Any]) -> dict[str, Any]:
        """The patch of the workdir; `record_baseline` records the episode-start state instead (see
        server/patch_baseline.py), which every later diff (against HEAD) then leaves out."""
        base = body.get("base") or "HEAD"
        if not isinstance(base, str) or not re.match(r"^[A-Za-z0-9_./^~-]{1,200}$", base):
            raise ApiError(400, "base must be a git revision")
        record = _opt_bool(body, "record_baseline", False)
        with self.use(body.get("container_id")) as rec:
            workdir = _opt_path(body, "workdir") or rec.workdir
            if record:
                return self._record_baseline(rec, workdir)
            res = None
            if base == "HEAD":
                res = self._run(rec, patch_baseline.DIFF_SCRIPT, timeout=300.0, workdir=workdir, env=None,
                                max_output=self.config.max_eval_output_bytes, merge_stderr=False)
                if res.returncode == patch_baseline.NO_BASELINE_EXIT:
                    if rec.baseline:
                        raise ApiError(422, f"the baseline recorded in {workdir} is gone: "
                                            f"{decode_text(res.stderr).strip()[:2000]}")
                    res = None
            if res is None:  # no baseline: everything untracked counts
                git_diff = "git -c core.quotepath=off diff --cached --binary"
                cmd = f"git add -A >/dev/null && {git_diff} {base}"
                if base == "HEAD":  # a repository without commits yet diffs against the empty tree
                    cmd = (f"git add -A >/dev/null && if git rev-parse -q --verify HEAD >/dev/null; "
                           f"then {git_diff} HEAD; else {git_diff}; fi")
                res = self._run(rec, cmd, timeout=300.0, workdir=workdir, env=None,
                                max_output=self.config.max_eval_output_bytes, merge_stderr=False)
        if res.returncode != 0:
            raise ApiError(422, f"git diff failed in {workdir}: {decode_text(res.stderr).strip()[:2000]}")
        if res.truncated:
            raise ApiError(413, f"patch larger than {self.config.max_eval_output_bytes} bytes")
        return _encode_bytes("patch", res.output)

    def _record_baseline(self, rec: ContainerRecord, workdir: str) -> dict[str, Any]:
        res = self._run(rec, patch_baseline.BASELINE_SCRIPT, timeout=600.0, workdir=workdir, env=None,
                        max_output=64 << 10, merge_stderr=False)
        if res.returncode != 0:
            raise ApiError(422, f"cannot record a baseline in {workdir}: {decode_text(res.stderr).strip()[:2000]}")
        rec.baseline = True
        return {"patch": "", "baseline": decode_text(res.output).strip()}

    def write_file(self, body: dict[str, Any]) -> dict[str, Any]:
        data = _decode_content(body)
        mode = int(_opt_number(body, "mode", 0o644, lo=0, hi=0o7777, integer=True))
        with self.use(body.get("container_id")) as rec:
            path = _resolve(_require_path(body, "path"), rec.workdir)
            parent, name = os.path.dirname(path), os.path.basename(path)
            if not name:
                raise ApiError(400, f"path {path!r} names a directory")
            if self._is_directory(rec, path):  # Docker's tar upload would replace the directory by the file
                raise ApiError(400, f"{path} is a directory", path=path)
            tar_bytes = io.BytesIO()
            with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode, int(time.time())
                tar.addfile(info, io.BytesIO(data))
            try:
                ok = self.client.api.put_archive(rec.id, parent, tar_bytes.getvalue())
            except docker.errors.NotFound:
                ok = False
            if not ok:
                if not _opt_bool(body, "create_dirs", True):
                    raise ApiError(404, f"directory {parent!r} does not exist")
                res = self._run(rec, f"mkdir -p -- {_sh_quote(parent)}", timeout=60.0, workdir="/", env=None,
                                max_output=4096)
                if res.returncode != 0:
                    raise ApiError(422, f"cannot create directory {parent!r}: {decode_text(res.output).strip()}")
                try:
                    self.client.api.put_archive(rec.id, parent, tar_bytes.getvalue())
                except docker.errors.APIError as exc:
                    raise ApiError(422, f"cannot write {path!r}: {exc.explanation}") from None
        return {"ok": True, "path": path, "bytes": len(data)}

    def _is_directory(self, rec: ContainerRecord, path: str) -> bool:
        """Whether ``path`` is a directory, from the stat header of a HEAD on the archive endpoint (no body)."""
        api = self.client.api
        resp = api.head(api._url("/containers/{0}/archive", rec.id), params={"path": path})
        header = resp.headers.get("X-Docker-Container-Path-Stat") if resp.status_code == 200 else None
        if not header:
            return False
        try:
            stat = json.loads(base64.b64decode(header))
        except (ValueError, TypeError):
            return False
        return bool(int(stat.get("mode", 0)) & (1 << 31))  # Go's os.ModeDir

    def read_file(self, body: dict[str, Any], _links: int = 0) -> dict[str, Any]:
        limit = int(_opt_number(body, "max_bytes", self.config.max_file_bytes, lo=0, hi=self.config.max_file_bytes))
        with self.use(body.get("container_id")) as rec:
            path = _resolve(_require_path(body, "path"), rec.workdir)
            try:
                stream, stat = self.client.api.get_archive(rec.id, path)
            except docker.errors.NotFound:
                raise ApiError(404, f"no such file: {path}", path=path) from None
            except docker.errors.APIError as exc:
                if exc.status_code is not None and exc.status_code >= 500 and not _PATH_REFUSED.search(str(exc)):
                    raise
                # a symlink loop, a path through a file: the path's fault, said without host paths
                raise ApiError(422, f"cannot read {path}: {self.scrub(str(exc.explanation or exc))}",
                               path=path) from None
            mode = int(stat.get("mode", 0))
            if mode & (1 << 31):  # Go's os.ModeDir
                raise ApiError(400, f"{path} is a directory", path=path)
            if stat.get("size", 0) > limit:
                raise ApiError(413, f"{path} has {stat['size']} bytes, more than the limit {limit}", path=path)
            raw = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as tar:
            member = next((m for m in tar.getmembers()), None)
            if member is None:
                raise ApiError(404, f"no such file: {path}")
            if member.issym() or member.islnk():
                if _links >= MAX_SYMLINKS:
                    raise ApiError(422, f"cannot read {path}: too many levels of symbolic links", path=path)
                # Follow one link level by asking for the target (relative to the link's directory).
                return self.read_file({**body, "path": _resolve(member.linkname, os.path.dirname(path))}, _links + 1)
            fh = tar.extractfile(member)
            data = fh.read() if fh else b""
        result = _encode_bytes("content", data)
        result.update({"path": path, "size": len(data), "mode": mode & 0o7777})
        return result

    def evaluate(self, body: dict[str, Any]) -> dict[str, Any]:
        patch = body.get("patch", "")
        if not isinstance(patch, str):
            raise ApiError(400, "patch must be a string")
        eval_script = _require_str(body, "eval_script")
        timeout = _opt_number(body, "timeout", 1800.0, lo=1, hi=self.config.max_timeout)
        max_out = int(_opt_number(body, "max_output_bytes", self.config.max_eval_output_bytes, lo=1024,
                                  hi=self.config.max_eval_output_bytes))
        start = time.monotonic()
        with self.use(body.get("container_id")) as rec:
            workdir = _opt_path(body, "workdir") or rec.workdir
            apply_status, strategy, apply_log = "empty", None, ""
            if patch.strip():
                self.write_file({"container_id": rec.id, "path": f"{SCRATCH}/patch.diff", "content": patch})
                apply_status = "failed"
                logs = []
                for strategy_name, cmd in APPLY_STRATEGIES:
                    res = self._run(rec, cmd.format(p=f"{SCRATCH}/patch.diff"), timeout=300.0, workdir=workdir,
                                    env=None, max_output=64 << 10)
                    logs.append(f">>> {strategy_name}\n{decode_text(res.output)}")
                    if res.returncode == 0:
                        apply_status, strategy = "applied", strategy_name
                        break
                apply_log = "\n".join(logs)
            result: dict[str, Any] = {"apply_status": apply_status, "apply_strategy": strategy,
                                      "apply_output": apply_log}
            if apply_status == "failed":
                result.update({"returncode": None, "test_log": "", "timed_out": False, "truncated": False})
            else:
                self.write_file({"container_id": rec.id, "path": f"{SCRATCH}/eval.sh", "content": eval_script,
                                 "mode": 0o755})
                res = self._run(rec, f"bash {SCRATCH}/eval.sh", timeout=timeout, workdir=workdir, env=None,
                                max_output=max_out)
                result.update({"returncode": res.returncode, "test_log": decode_text(res.output),
                               "timed_out": res.timed_out, "truncated": res.truncated})
        result["duration"] = round(time.monotonic() - start, 4)
        return result


# Tried in order, as the SWE-bench harness does; each is all-or-nothing, so a
# failed attempt leaves the checkout untouched for the next one. `git apply
# --reject` is deliberately absent: a partly applied patch must not be graded.
APPLY_STRATEGIES = [
    ("git apply", "git apply --verbose {p}"),
    ("git apply --ignore-whitespace", "git apply --verbose --ignore-space-change --ignore-whitespace {p}"),
    ("patch --fuzz=5", "patch --batch --fuzz=5 -p1 --dry-run -i {p} >/dev/null && patch --batch --fuzz=5 -p1 -i {p}"),
]


# --------------------------------------------------------------------------- request parsing


def _require_str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"missing or empty string field {key!r}")
    if "\x00" in value:
        raise ApiError(400, f"field {key!r} contains a NUL byte")
    return value


def _require_path(body: dict[str, Any], key: str) -> str:
    path = _require_str(body, key)
    if len(path) > 4096:
        raise ApiError(400, f"{key} is too long")
    return path


def _opt_path(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value or len(value) > 4096:
        raise ApiError(400, f"{key} must be an absolute path")
    return value


NETWORK_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _opt_network(body: dict[str, Any], cfg: ExecConfig) -> bool | str:
    """``network``: false/"none" (default), true/"default" (Docker's bridge), or an allowlisted name."""
    value = body.get("network", False)
    if value is None or value is False or value == "none":
        return False
    if value is True or value in ("default", "bridge"):
        if not cfg.allow_network:
            raise ApiError(403, "this exec server does not allow networked containers")
        return True
    if not isinstance(value, str) or not NETWORK_NAME_RE.match(value) or value == "host":
        raise ApiError(400, "network must be true/false, 'none', 'default' or a Docker network name")
    if value not in cfg.networks:
        raise ApiError(403, f"network {value!r} is not allowed on this node (allowed: "
                            f"{', '.join(cfg.networks) or 'none'}; set SWE_EXEC_NETWORKS)", network=value)
    return value


def _opt_label(body: dict[str, Any], key: str) -> str:
    value = body.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
        raise ApiError(400, f"{key} must be at most 128 characters of letters, digits and _.:@/+-")
    return value


def _opt_bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise ApiError(400, f"{key} must be true or false")
    return value


def _opt_number(body: dict[str, Any], key: str, default: float, *, lo: float, hi: float,
                integer: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ApiError(400, f"{key} must be a number")
    if integer and value != int(value):
        raise ApiError(400, f"{key} must be a whole number")
    if not lo <= value <= hi:
        raise ApiError(400, f"{key} must be between {lo} and {hi}")
    return float(value)


MIN_MEMORY = 6 << 20  # the Docker daemon's own minimum
FORBIDDEN_WORKDIRS = ("/proc", "/sys", "/dev")


def _check_memory(memory: str) -> None:
    """A memory limit Docker accepts and this node can give (checked before anything starts)."""
    wanted = parse_bytes(memory)
    total, _ = node_memory()
    if wanted < MIN_MEMORY:
        raise ApiError(400, f"memory {memory!r} is below Docker's minimum of 6m")
    if total and wanted > total:
        raise ApiError(400, f"memory {memory!r} is more than this node has ({total >> 20}m)")


def _opt_workdir(body: dict[str, Any]) -> str:
    """An absolute, normalised workdir outside the kernel's pseudo file systems (default /testbed)."""
    workdir = _opt_path(body, "workdir")
    if workdir is None:
        return "/testbed"
    if ".." in workdir.split("/"):
        raise ApiError(400, "workdir may not contain '..'")
    workdir = os.path.normpath(workdir).replace("//", "/")
    if any(workdir == p or workdir.startswith(p + "/") for p in FORBIDDEN_WORKDIRS):
        raise ApiError(400, f"workdir may not be under {', '.join(FORBIDDEN_WORKDIRS)}")
    return workdir


def _opt_user(body: dict[str, Any]) -> str | None:
    """A user name or uid[:gid] to run the command as (the image's default user when absent)."""
    value = body.get("user")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not USER_RE.match(value):
        raise ApiError(400, "user must be a user name or uid[:gid] (letters, digits and _.-, at most 32 each)")
    return value


def _opt_env(body: dict[str, Any]) -> dict[str, str]:
    env = body.get("env")
    if env is None:
        return {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and ENV_NAME_RE.match(k) and isinstance(v, str) and "\x00" not in v for k, v in env.items()
    ):
        raise ApiError(400, "env must map variable names to strings")
    return env


def _decode_content(body: dict[str, Any]) -> bytes:
    if "content_b64" in body:
        value = body["content_b64"]
        if not isinstance(value, str):
            raise ApiError(400, "content_b64 must be a base64 string")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "content_b64 is not valid base64") from None
    value = body.get("content")
    if not isinstance(value, str):
        raise ApiError(400, "give the file as 'content' (text) or 'content_b64' (bytes)")
    return value.encode("utf-8")


def _encode_bytes(key: str, data: bytes) -> dict[str, Any]:
    """Text when it is valid UTF-8, base64 otherwise, so bytes round-trip exactly."""
    try:
        return {key: data.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {key: base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def _resolve(path: str, workdir: str) -> str:
    return os.path.normpath(path if path.startswith("/") else os.path.join(workdir, path))


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


# --------------------------------------------------------------------------- HTTP app


def create_app(manager: ContainerManager) -> Flask:
    cfg = manager.config
    app = Flask("swe_exec_server")
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]

    @app.before_request
    def _auth() -> Any:
        g.t0 = time.monotonic()
        if request.path == "/healthz":
            return None
        header = request.headers.get("Authorization", "")
        supplied = header[7:] if header.startswith("Bearer ") else ""
        if not cfg.token or not hmac.compare_digest(supplied.encode(), cfg.token.encode()):
            return jsonify(error="unauthorized: missing or wrong bearer token"), 401
        return None

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Any:
        resp = jsonify(error=exc.message, **exc.extra)
        resp.status_code = exc.status
        if exc.status == 429:
            resp.headers["Retry-After"] = "2"
        return resp

    @app.errorhandler(BadRequest)
    def _bad_request(exc: BadRequest) -> Any:
        return jsonify(error=exc.message), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Any:
        resp = jsonify(error=f"{exc.name}: {exc.description}")
        resp.status_code = exc.code or 500
        return resp

    @app.errorhandler(docker.errors.APIError)
    def _docker_error(exc: docker.errors.APIError) -> Any:
        reason = manager.scrub(str(exc.explanation or exc))
        log.warning("docker error: %s", reason)
        # Docker's 400 is the request's fault (e.g. a limit it refuses); its 5xx is the node's.
        status = exc.status_code if exc.status_code in (400, 404, 409) else 502
        return jsonify(error=f"docker: {reason}"), status

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Any:
        log.exception("unhandled error on %s", request.path)
        return jsonify(error=f"internal error: {type(exc).__name__}: {exc}"), 500

    def body() -> dict[str, Any]:
        return parse_body(request.get_data(cache=False))

    def resources() -> dict[str, Any]:
        total, available = node_memory()
        return {"memory_total": total, "memory_available": available, "cpus": os.cpu_count() or 1}

    @app.get("/healthz")
    def healthz() -> Any:
        try:
            manager.client.ping()
            docker_ok = True
        except Exception:  # noqa: BLE001 - any failure means "not healthy"
            docker_ok = False
        managed = manager.count()
        leased = manager.leased_count()
        # Warm containers are evicted for a lease, so they are not taken from `free`.
        return jsonify(ok=docker_ok, docker=docker_ok, server_id=cfg.server_id, version=__version__,
                       backend=cfg.backend, running_containers=managed, managed_containers=managed,
                       leased_containers=leased, capacity=cfg.max_containers,
                       free=max(0, cfg.max_containers - leased), max_warm=cfg.max_warm,
                       warm_dropped=len(manager.warm_dropped()),
                       **manager.warm_counts(), **resources()), (200 if docker_ok else 503)

    @app.get("/images")
    def images() -> Any:
        tags = sorted(t for img in manager.client.images.list() for t in img.tags)
        return jsonify(images=tags, count=len(tags))

    @app.get("/status")
    def status() -> Any:
        recs = [r.public() for r in manager.records()]
        return jsonify(server_id=cfg.server_id, version=__version__, backend=cfg.backend,
                       capacity=cfg.max_containers, managed_containers=len(recs), containers=recs,
                       **manager.warm_counts(), warm_targets=manager.warm_targets(), warm_stats=manager.warm_stats,
                       warm_dropped=manager.warm_dropped(),
                       **resources(),
                       defaults={"memory": cfg.memory, "cpus": cfg.cpus, "pids_limit": cfg.pids_limit,
                                 "idle_ttl": cfg.idle_ttl, "max_lifetime": cfg.max_lifetime,
                                 "max_output_bytes": cfg.max_output_bytes, "max_warm": cfg.max_warm,
                                 "warm_ttl": cfg.warm_ttl, "warm_min_free_memory": cfg.warm_min_free_memory})

    routes = {
        "/container/create": manager.create,
        "/container/exec": manager.exec,
        "/container/diff": manager.diff,
        "/container/write_file": manager.write_file,
        "/container/read_file": manager.read_file,
        "/container/evaluate": manager.evaluate,
        "/container/destroy": lambda b: manager.destroy(b.get("container_id")),
        "/warm": manager.warm,
    }
    for path, handler in routes.items():
        app.add_url_rule(path, path, _json_route(handler, body), methods=["POST"])

    @app.post("/containers/touch")
    def touch() -> Any:
        ids = body().get("container_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ApiError(400, "container_ids must be a list of strings")
        touched, missing = manager.touch(ids)
        return jsonify(touched=len(touched), missing=missing)

    return app


def _json_route(handler: Any, body: Any) -> Any:
    def view() -> Any:
        return jsonify(handler(body()))

    return view


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    cfg = ExecConfig.from_env()
    p = argparse.ArgumentParser(description="swe-rl exec server: owns one Docker node's task containers")
    p.add_argument("--host", default=cfg.host)
    p.add_argument("--port", type=int, default=cfg.port)
    p.add_argument("--server-id", default=cfg.server_id)
    p.add_argument("--token-file", default=None, help="read the bearer token from this file")
    p.add_argument("--max-containers", type=int, default=cfg.max_containers)
    p.add_argument("--threads", type=int, default=cfg.threads)
    p.add_argument("--reap-interval", type=float, default=cfg.reap_interval)
    p.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "INFO"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg.host, cfg.port, cfg.server_id = a.host, a.port, a.server_id
    cfg.max_containers, cfg.threads, cfg.reap_interval = a.max_containers, a.threads, a.reap_interval
    if a.token_file:
        cfg.token = _read_token("", a.token_file)
    if not cfg.token:
        raise SystemExit("error: no token: set SWE_EXEC_TOKEN or SWE_EXEC_TOKEN_FILE (or --token-file)")

    import waitress

    manager = build_manager(cfg)
    reaped = manager.reap_once()
    log.info("exec server %s on %s:%d; adopted %d containers, reaped %d", cfg.server_id, cfg.host, cfg.port,
             len(manager.records()), len(reaped))
    manager.start_reaper()
    manager.start_refiller()
    app = create_app(manager)

    def _term(signum: int, frame: Any) -> None:
        destroyed = manager.stop()
        log.info("stopping: destroyed %d unclaimed warm containers", destroyed)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _term)
    waitress.serve(app, host=cfg.host, port=cfg.port, threads=cfg.threads, channel_timeout=cfg.max_timeout + 60,
                   connection_limit=max(1000, cfg.threads * 4), ident="swe-exec-server", clear_untrusted_proxy_headers=True,
                   asyncore_use_poll=True)  # select() cannot watch descriptors past 1024


def build_manager(cfg: ExecConfig) -> ContainerManager:
    """The manager for cfg.backend; `memory` (load tests only) is loud about what it is."""
    if cfg.backend == "docker":
        return ContainerManager(cfg)
    if cfg.backend != "memory":
        raise SystemExit(f"error: unknown SWE_EXEC_BACKEND {cfg.backend!r} (docker, or memory for load tests)")
    try:
        from memory_backend import FakeDockerClient  # next to this file; never deployed to a node
    except ImportError:
        from server.memory_backend import FakeDockerClient

    for _ in range(3):
        log.warning("SWE_EXEC_BACKEND=memory: NO CONTAINERS, commands are not run (load tests only)")
    return ContainerManager(cfg, client=FakeDockerClient.from_env())


if __name__ == "__main__":
    main()
