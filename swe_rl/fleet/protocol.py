"""The fleet's wire contract: what exec servers, the pool and the client send each other.

One place for the shapes of the container calls (create, exec, diff, read/write file,
evaluate, warm), the error body, the container labels and the timeouts that the three
parts must agree on. Standard library only, so an exec node needs nothing more for it.

Requests are frozen dataclasses; ``None`` in an optional field means "not given, use the
server's default". An exec server checks a JSON body field by field (its own messages,
see `swe_rl.fleet.exec.validation`) and then hands one of these to its operations.
Responses are `TypedDict`s: they document the JSON objects the servers answer with.

Every error answer is a JSON object ``{"error": <message>, ...}`` (`error_body`), with a
4xx status for the caller's mistakes and 5xx for the fleet's own failures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, TypedDict

__all__ = [
    "EVAL_APPLY_ALLOWANCE",
    "PLAIN_CALL_TIMEOUT",
    "LABEL_MANAGED",
    "LABEL_SERVER",
    "LABEL_LEASE",
    "LABEL_OWNER",
    "LABEL_DEADLINE",
    "LABEL_IDLE_TTL",
    "LABEL_CREATED",
    "LABEL_WARM",
    "MANAGED_VALUE",
    "ApiError",
    "error_body",
    "read_token",
    "CreateRequest",
    "WarmRequest",
    "ExecRequest",
    "DiffRequest",
    "WriteFileRequest",
    "ReadFileRequest",
    "EvaluateRequest",
    "CreateResponse",
    "ExecResponse",
    "DiffResponse",
    "WriteFileResponse",
    "ReadFileResponse",
    "EvaluateResponse",
    "WarmResponse",
    "ErrorBody",
]

# --------------------------------------------------------------------------- shared constants

EVAL_APPLY_ALLOWANCE = 900.0
"""Seconds an evaluate call gets on top of its test timeout: applying the patch (up to 3 strategies)."""
PLAIN_CALL_TIMEOUT = 300.0
"""Seconds the pool waits for a node's answer to a call without its own timeout (diff, file calls)."""

# Labels on every container an exec server manages; the reaper and the pool's reconciliation read them.
LABEL_MANAGED = "swe-rl.managed-by"
LABEL_SERVER = "swe-rl.exec-server"
LABEL_LEASE = "swe-rl.lease-id"
LABEL_OWNER = "swe-rl.owner"
LABEL_DEADLINE = "swe-rl.deadline"
LABEL_IDLE_TTL = "swe-rl.idle-ttl"
LABEL_CREATED = "swe-rl.created"
LABEL_WARM = "swe-rl.warm"
MANAGED_VALUE = "swe-rl"
"""Value of `LABEL_MANAGED`."""


# --------------------------------------------------------------------------- errors and tokens


class ApiError(Exception):
    """An error with an HTTP status and a message the caller can act on.

    `extra` goes into the JSON error body next to ``error``; `headers` into the HTTP answer.
    """

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers or {}, extra

    def body(self) -> dict[str, Any]:
        return error_body(self.message, **self.extra)


class ErrorBody(TypedDict, total=False):
    error: str
    """What went wrong, for a human; further keys (``lease_lost``, ``node_down``, ``path``, ...) for code."""


def error_body(message: str, **extra: Any) -> dict[str, Any]:
    """The JSON object every error answer carries."""
    return {"error": message, **extra}


def read_token(token: str, token_file: str) -> str:
    """The bearer token: `token` when given, else the first line-stripped content of `token_file`, else ""."""
    if token:
        return token.strip()
    if token_file:
        with open(os.path.expanduser(token_file), encoding="utf-8") as fh:
            return fh.read().strip()
    return ""


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class CreateRequest:
    """``POST /container/create`` (exec) — the pool's ``/allocate`` takes the same options."""

    image: str
    memory: str | None = None
    """Memory limit like '4g' (no swap beyond it)."""
    cpus: float | None = None
    pids_limit: int | None = None
    network: bool | str | None = None
    """False/'none' (default): no network; True/'default': Docker's bridge; a name: an allowlisted network."""
    workdir: str | None = None
    """Absolute; default /testbed."""
    env: dict[str, str] = field(default_factory=dict)
    lease_id: str = ""
    owner: str = ""
    ttl: float | None = None
    """Hard lifetime in seconds."""
    idle_ttl: float | None = None
    """Seconds without a call after which the reaper removes it."""


@dataclass(frozen=True)
class WarmRequest:
    """``POST /warm``: keep `count` started containers of this exact create request for `ttl` seconds."""

    create: CreateRequest
    count: int = 1
    ttl: float | None = None


@dataclass(frozen=True)
class ExecRequest:
    """``POST /container/exec``: run a shell command."""

    container_id: str
    command: str
    timeout: float | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    max_output_bytes: int | None = None
    user: str | None = None
    separate_stderr: bool = False
    """False: one interleaved ``output``; True: ``output`` is stdout and ``stderr`` comes apart."""


@dataclass(frozen=True)
class DiffRequest:
    """``POST /container/diff``: the patch of the work tree (or, with `record_baseline`, record its start)."""

    container_id: str
    base: str = "HEAD"
    workdir: str | None = None
    record_baseline: bool = False


@dataclass(frozen=True)
class WriteFileRequest:
    """``POST /container/write_file``; on the wire the content is ``content`` (text) or ``content_b64``."""

    container_id: str
    path: str
    content: bytes
    mode: int = 0o644
    create_dirs: bool = True


@dataclass(frozen=True)
class ReadFileRequest:
    """``POST /container/read_file``."""

    container_id: str
    path: str
    max_bytes: int | None = None


@dataclass(frozen=True)
class EvaluateRequest:
    """``POST /container/evaluate``: apply a patch, then run the eval script."""

    container_id: str
    eval_script: str
    patch: str = ""
    timeout: float | None = None
    workdir: str | None = None
    max_output_bytes: int | None = None


# --------------------------------------------------------------------------- responses


class CreateResponse(TypedDict):
    container_id: str
    name: str
    image: str
    workdir: str
    deadline: float
    network: bool | str
    warm: bool
    """Handed over from the warm pool (no Docker call)."""


class ExecResponse(TypedDict, total=False):
    returncode: int
    output: str
    timed_out: bool
    truncated: bool
    output_bytes: int
    duration: float
    stderr: str
    """Only with ``separate_stderr``."""
    stderr_truncated: bool


class DiffResponse(TypedDict, total=False):
    patch: str
    encoding: str
    """"utf-8", or "base64" when the patch is not valid UTF-8."""
    baseline: str
    """Only when a baseline was recorded."""


class WriteFileResponse(TypedDict):
    ok: bool
    path: str
    bytes: int


class ReadFileResponse(TypedDict):
    content: str
    encoding: str
    """"utf-8", or "base64" when the file is not valid UTF-8."""
    path: str
    size: int
    mode: int


class EvaluateResponse(TypedDict):
    apply_status: str
    """"applied", "failed" (no strategy applied the patch) or "empty" (no patch)."""
    apply_strategy: str | None
    apply_output: str
    returncode: int | None
    test_log: str
    timed_out: bool
    truncated: bool
    duration: float


class WarmResponse(TypedDict, total=False):
    ok: bool
    image: str
    count: int
    accepted: int
    ttl: float
    ready: int
    starting: int
    max_warm: int
    dropped: str
    """Why this spec is not warmed (it failed to start), when it is not."""
