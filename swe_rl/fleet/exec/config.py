"""Exec server settings: `ExecConfig` (one field per `SWE_EXEC_*` variable) and size helpers.

Read once at start (`ExecConfig.from_env`, then the command-line flags of `app.main`); every
other part of the exec server gets the same object.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from swe_rl.fleet.settings import EnvVar, field_types, prefixed, read_env

MEMORY_RE = re.compile(r"^[0-9]+[bkmgBKMG]?$")


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
    drain_seconds: float = 600.0
    """On SIGTERM, seconds the calls in flight get to finish before the server exits (no new container
    lands meanwhile; leased containers stay for the next start). The unit's TimeoutStopSec is above it."""
    threads: int = 128
    """WSGI worker threads: a call holds one while it runs on the server, not while its commands run
    (`parking.py`)."""
    allow_pull: bool = False
    """Pull images that are missing locally, once per image in the background (off: a missing image is a
    clear 404). Give images by full reference (`registry:5000/name:tag`) to pull from your registry."""
    image_pull_wait: float = 300.0
    """Seconds a create waits for its image's pull; past it a 503 with the progress (the pull goes on)."""
    image_prefetch_keep: float = 1800.0
    """Seconds a prefetched image no create asked for yet is never evicted (its lease is coming)."""
    image_parallel_pulls: int = 2
    """Pulls running at once on this node (more wait their turn)."""
    image_disk_budget: str = ""
    """Bytes the images may take ('200g', a byte count, or '80%' of Docker's disk); empty: no limit.
    Least-recently-used images no container uses and nobody pinned are removed to stay under it."""
    pinned_images: tuple[str, ...] = ()
    """Images never evicted (comma-separated references)."""
    image_prefixes: tuple[str, ...] = ()
    """When set, the budget covers (counts and evicts) only images all of whose names start with one of
    these, e.g. the registry's `registry:5000/`; empty: every image on the node."""
    allow_network: bool = True
    """Whether a create request may ask for Docker's default (bridge) network."""
    networks: tuple[str, ...] = ()
    """Named Docker networks a create request may ask for (e.g. an internal no-egress one for tests)."""
    keepalive_command: tuple[str, ...] = ("sleep", "infinity")
    max_warm: int = 8
    """Warm (started, unclaimed) containers this node holds at most; they count against max_containers."""
    warm_min_free_memory: str = "2g"
    """Warm containers are started only while the node's MemAvailable stays above this."""
    warm_ttl: float = 600.0
    """Default lifetime of a /warm target and of each warm container (a request may ask up to
    max_lifetime)."""
    warm_parallel: int = 0
    """Warm containers being started at once; 0: 4 per CPU core, at most max_warm (Docker's create+start
    is mostly waiting on runc and the kernel, so a tight allocate loop needs more than one start per core;
    bench/warm_bench.py measures it)."""
    warm_burst_window: float = 10.0
    """Claims of the last this many seconds raise a warm target to twice their number (at most max_warm),
    so the refill keeps up with back-to-back allocations; 0 keeps targets as asked."""
    warm_max_failures: int = 3
    """A warm spec whose start fails this many times in a row is dropped (at once when Docker refuses it)."""
    warm_interval: float = 1.0
    """Seconds between refill passes (a claim or a /warm call wakes the refiller at once)."""
    state_dir: str = "~/.cache/swe-rl/exec-state"
    """Where the state file of claimed warm containers (lease id, owner, deadline) lives."""
    tls_cert: str = ""
    """PEM certificate (chain) to serve HTTPS with (`SWE_EXEC_TLS_CERT`, `--tls-cert`); with `tls_key`. Unset:
    plain HTTP (bind to a private interface only). The pool then reaches this node by an https:// URL."""
    tls_key: str = field(default="", repr=False)
    """PEM private key of `tls_cert` (`SWE_EXEC_TLS_KEY`, `--tls-key`); readable by the server's user only."""
    lease_keys: tuple[str, ...] = ()
    """Public keys (base64url Ed25519) of pools whose per-lease credentials this node takes for direct
    calls (`SWE_EXEC_LEASE_KEYS`, comma-separated); a pool also hands its own over (`POST /lease-keys`)."""
    backend: str = "docker"
    """What runs this node's containers: a name of `backend.BACKENDS`, `docker` (the default) or `memory`
    (load tests: no containers, commands are not run; `memory_backend.py`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExecConfig:
        """Defaults, then the `SWE_EXEC_*` variables of `ENV` (from `env`, default the process environment)."""
        return cls(**read_env(ENV, field_types(cls), env))


ENV: dict[str, EnvVar] = prefixed(
    "SWE_EXEC_",
    [f.name for f in fields(ExecConfig)],
    token=EnvVar("SWE_EXEC_TOKEN", file="SWE_EXEC_TOKEN_FILE", parse=str.strip),
    keepalive_command=None,
)
"""The variable of each `ExecConfig` field: `SWE_EXEC_<FIELD>`; the token also from `SWE_EXEC_TOKEN_FILE`."""


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
