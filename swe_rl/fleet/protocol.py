"""The fleet's wire contract: what exec servers, the pool and the client send each other.

One set of pydantic models imported by all three parts (the SWE-ReX way): the servers validate a
body with `parse` (``Model.model_validate`` + `refusal`, the one mapping of a `ValidationError` onto
the 400 the servers have always answered; tests/fleet/test_bad_input.py is that contract), and the
client builds its bodies from the same models (`wire`). Also the error body, the container labels
and the timeouts the parts agree on. Needs pydantic only, so a node needs nothing more for it.

Requests are strict (no ``"10"`` for 10, finite numbers only) and ignore unknown fields, as the
servers always did; ``None`` means "the server's default". What depends on one node (its limits,
memory, CPUs, networks) is checked by that node after the model (`swe_rl.fleet.exec.validation`).
A container call has two halves: the call a lease holder sends the pool (`ExecCall`, ...) and the
node's request (`ExecRequest`, ...: the same fields with the ``container_id`` the pool put in).
The field types the models are built from: `swe_rl.fleet.wire_fields`. Answers:
`swe_rl.fleet.responses`. Every error answer is ``{"error": <message>, ...}`` (`error_body`): 4xx
for the caller's mistakes, 5xx for the fleet's own failures. More: docs/wire.md.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from swe_rl.fleet.image_names import refuse_snapshot_image
from swe_rl.fleet.wire_fields import (
    GIT_REVISION,
    AbsPath,
    ContainerId,
    Count,
    Env,
    FilePath,
    Image,
    Label,
    Memory,
    Name,
    Network,
    RequestId,
    Seconds,
    Text,
    User,
    Whole,
    Workdir,
)

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
    "MAX_HEARTBEAT_BATCH",
    "ApiError",
    "error_body",
    "refusal",
    "parse",
    "wire",
    "CreateOptions",
    "CreateRequest",
    "WarmRequest",
    "ExecCall",
    "ExecRequest",
    "DiffCall",
    "DiffRequest",
    "WriteFileCall",
    "WriteFileRequest",
    "ReadFileCall",
    "ReadFileRequest",
    "EvaluateCall",
    "EvaluateRequest",
    "DestroyRequest",
    "TouchRequest",
    "AllocateRequest",
    "PoolWarmRequest",
    "HeartbeatRequest",
    "CloseRequest",
    "ROUTED_CALLS",
]

# --------------------------------------------------------------------------- shared constants

EVAL_APPLY_ALLOWANCE = 900.0
"""Seconds an evaluate call gets on top of its test timeout: applying the patch (up to 3 strategies)."""
PLAIN_CALL_TIMEOUT = 300.0
"""Seconds the pool waits for a node's answer to a call without its own timeout (diff, file calls)."""
MAX_HEARTBEAT_BATCH = 10_000
"""Leases one batch heartbeat may name (a client with more sends several requests)."""

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


def error_body(message: str, **extra: Any) -> dict[str, Any]:
    """The JSON object every error answer carries: ``error`` for a human, further keys for code."""
    return {"error": message, **extra}


# --------------------------------------------------------------------------- request base (field types: wire_fields)

LeaseIds = Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_HEARTBEAT_BATCH)]
"""The leases one batch heartbeat names."""


class Wire(BaseModel):
    """A request body: strict JSON types, finite numbers, unknown fields ignored (as ever)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, frozen=True, extra="ignore")


# --------------------------------------------------------------------------- exec server requests


class CreateOptions(Wire):
    """What a container is made of: the node's create and warm, the pool's allocate and warm."""

    image: Image
    workdir: Workdir | None = None
    """Absolute; the node's default is /testbed."""
    network: Network = False
    """False/'none' (default): no network; True/'default': Docker's bridge; a name: an allowlisted network."""
    memory: Memory | None = None
    """Memory limit like '4g' (no swap beyond it)."""
    cpus: Annotated[float, Field(gt=0)] | None = None
    pids_limit: Annotated[Whole, Field(ge=16, le=1 << 20)] | None = None
    env: Env = {}


class CreateRequest(CreateOptions):
    """``POST /container/create`` (exec); the pool fills `lease_id`, `owner` and `idle_ttl`."""

    lease_id: Label = ""
    owner: Label = ""
    ttl: Annotated[float, Field(ge=1)] | None = None
    """Hard lifetime in seconds."""
    idle_ttl: Annotated[float, Field(ge=1)] | None = None
    """Seconds without a call after which the reaper removes it."""
    baseline: bool = False
    """For a restore (the pool sets it on an allocate from a snapshot): claim a warm container whose
    episode baseline was recorded ahead (`WarmRequest.baseline`), a warm pool of its own."""


class WarmRequest(CreateOptions):
    """``POST /warm`` (exec): keep `count` started containers of this exact create request for `ttl` seconds."""

    count: Annotated[Whole, Field(ge=0, le=1 << 16)] = 1
    ttl: Annotated[float, Field(ge=1)] | None = None
    baseline: bool = False
    """Record the episode baseline in each warm container once it is started (for restores: the
    restore then skips it). Part of the exact request: only a create with `baseline` claims them."""


class ExecCall(Wire):
    """``POST /exec`` (pool, with ``lease_id``): run a shell command."""

    command: Text
    timeout: Seconds | None = None
    env: Env = {}
    max_output_bytes: Annotated[Whole, Field(ge=64)] | None = None
    user: User = None
    """A user name or uid[:gid]; the image's default user when absent."""
    separate_stderr: bool = False
    """False: one interleaved ``output``; True: ``output`` is stdout and ``stderr`` comes apart."""
    workdir: AbsPath | None = None


class ExecRequest(ExecCall):
    """``POST /container/exec`` (exec)."""

    container_id: ContainerId


class DiffCall(Wire):
    """``POST /diff``: the patch of the work tree (or, with `record_baseline`, record its start)."""

    base: Annotated[str, BeforeValidator(lambda v: v or "HEAD"), Field(pattern=GIT_REVISION)] = "HEAD"
    record_baseline: bool = False
    workdir: AbsPath | None = None


class DiffRequest(DiffCall):
    """``POST /container/diff``."""

    container_id: ContainerId


class WriteFileCall(Wire):
    """``POST /write_file``; on the wire the content is ``content`` (text) or ``content_b64`` (bytes)."""

    content: bytes
    mode: Annotated[Whole, Field(ge=0, le=0o7777)] = 0o644
    path: FilePath
    create_dirs: bool = True

    @model_validator(mode="before")
    @classmethod
    def _decode(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or isinstance(data.get("content"), bytes):
            return data
        forwarding = bool(info.context and info.context.get("forwarding"))
        if "content_b64" in data:
            value = data["content_b64"]
            if not isinstance(value, str):
                raise ValueError("content_b64 must be a base64 string")
            if forwarding:  # the pool passes the body on as it came: the node decodes it, once
                return {**data, "content": b""}
            try:
                return {**data, "content": base64.b64decode(value, validate=True)}
            except (binascii.Error, ValueError):
                raise ValueError("content_b64 is not valid base64") from None
        if not isinstance(data.get("content"), str):
            raise ValueError("give the file as 'content' (text) or 'content_b64' (bytes)")
        return {**data, "content": b"" if forwarding else data["content"].encode("utf-8")}

    def wire(self) -> dict[str, Any]:
        """The body to send: text as ``content``, other bytes as ``content_b64``."""
        body = wire(self, exclude={"content"})
        try:
            body["content"] = self.content.decode("utf-8")
        except UnicodeDecodeError:
            body["content_b64"] = base64.b64encode(self.content).decode("ascii")
        return body


class WriteFileRequest(WriteFileCall):
    """``POST /container/write_file``."""

    container_id: ContainerId


class ReadFileCall(Wire):
    """``POST /read_file``."""

    max_bytes: Annotated[Whole, Field(ge=0)] | None = None
    path: FilePath


class ReadFileRequest(ReadFileCall):
    """``POST /container/read_file``."""

    container_id: ContainerId


class EvaluateCall(Wire):
    """``POST /evaluate``: apply a patch, then run the eval script."""

    patch: str = ""
    eval_script: Text
    timeout: Annotated[float, Field(ge=1)] | None = None
    max_output_bytes: Annotated[Whole, Field(ge=1024)] | None = None
    workdir: AbsPath | None = None


class EvaluateRequest(EvaluateCall):
    """``POST /container/evaluate``."""

    container_id: ContainerId


class DestroyRequest(Wire):
    """``POST /container/destroy``: the node answers for an id it does not know."""

    container_id: str | None = None


class TouchRequest(Wire):
    """``POST /containers/touch``: these containers are alive (the pool's touch pass)."""

    container_ids: list[str]


ROUTED_CALLS: dict[str, type[Wire]] = {
    "exec": ExecCall,
    "diff": DiffCall,
    "evaluate": EvaluateCall,
    "write_file": WriteFileCall,
    "read_file": ReadFileCall,
}
"""The container calls a lease holder makes through the pool (``POST /<op>`` with a ``lease_id``)."""


# --------------------------------------------------------------------------- pool requests


class AllocateRequest(CreateOptions):
    """``POST /allocate``: lease a container; `request_id` makes a retry return the same lease."""

    _not_a_snapshot = field_validator("image")(refuse_snapshot_image)  # its image: from_snapshot only

    request_id: RequestId | None = None
    instance_id: Name | None = None
    expected: Count | None = None
    """Leases of this exact request the caller expects soon (raises the warm demand)."""
    owner: Name | None = None
    """Who asks (the client's owner id): only the owner of a snapshot may allocate from it."""
    from_snapshot: Name | None = None
    """A snapshot id (`swe_rl.fleet.snapshot_protocol`): the new lease starts in that state."""


class PoolWarmRequest(CreateOptions):
    """``POST /warm`` (pool): keep `count` containers of this exact request started ahead (0 cancels)."""

    _not_a_snapshot = field_validator("image")(refuse_snapshot_image)

    count: Count
    baseline: bool = False
    """Warm containers for allocates from a snapshot (baseline recorded ahead; `WarmRequest.baseline`)."""


class HeartbeatRequest(Wire):
    """``POST /heartbeat``: one lease (`lease_id`) or a client's whole batch (`lease_ids`)."""

    lease_id: str | None = None
    lease_ids: LeaseIds | None = None


class CloseRequest(Wire):
    """``POST /close``: by `lease_id`, or by `request_id` when the allocate was cancelled midway."""

    lease_id: str | None = None
    request_id: RequestId | None = None


# --------------------------------------------------------------------------- validation errors → 400

_MUST = {
    "container_id": "container_id must be a container id or name (letters, digits, '_', '.', '-')",
    "container_ids": "container_ids must be a list of strings",
    "lease_ids": "lease_ids must be a list of non-empty strings",
    "env": "env must map variable names to strings",
    "network": "network must be true/false, 'none', 'default' or a Docker network name",
    "memory": "memory must look like '4g', '512m' or a byte count",
    "cpus": "cpus must be a positive number",
    "user": "user must be a user name or uid[:gid] (letters, digits and _.-, at most 32 each)",
    "base": "base must be a git revision",
    "workdir": "workdir must be an absolute path",
    "patch": "patch must be a string",
    "path": "path is too long",
    "lease_id": "lease_id must be at most 128 characters of letters, digits and _.:@/+-",
    "owner": "owner must be at most 128 characters of letters, digits and _.:@/+-",
    "request_id": "request_id must be a non-empty string of at most 200 characters",
    "instance_id": "instance_id must be a non-empty string of at most 256 characters",
}
_REQUIRED_TEXT = ("image", "command", "eval_script")
_BOUNDS = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most"}


def refusal(exc: ValidationError) -> ApiError:
    """The 400 answer of a body a model refused: its first mistake, in field order, in the servers' words."""
    err = exc.errors(include_url=False)[0]
    kind, ctx = err["type"], err.get("ctx") or {}
    name = str(err["loc"][0]) if err["loc"] else ""
    if kind == "value_error":  # our own validators say it in full
        return ApiError(400, str(ctx.get("error", err["msg"])))
    if name == "lease_id" and kind in ("missing", "string_type", "string_too_short"):
        return ApiError(400, "missing or empty string field 'lease_id'")
    if name in _REQUIRED_TEXT or (name == "path" and kind in ("missing", "string_type", "string_too_short")):
        return ApiError(400, f"missing or empty string field {name!r}")
    if name == "lease_ids" and kind == "too_long" and len(err["loc"]) == 1:
        return ApiError(
            400, f"lease_ids holds {ctx['actual_length']} leases, at most {MAX_HEARTBEAT_BATCH} per request"
        )
    if name in _MUST:
        return ApiError(400, _MUST[name])
    if kind == "missing":
        return ApiError(400, f"missing field {name!r}")
    if kind == "bool_type":
        return ApiError(400, f"{name} must be true or false")
    if kind in ("int_type", "int_from_float"):
        return ApiError(400, f"{name} must be a whole number")
    if kind in _BOUNDS:
        return ApiError(400, f"{name} must be {_BOUNDS[kind]} {next(iter(ctx.values()))}")
    return ApiError(400, f"{name} must be a number" if "float" in kind or "finite" in kind else err["msg"])


FORWARDING = {"forwarding": True}
"""Validation context of a body the pool checks and forwards unchanged (file content is not decoded)."""


def parse(model: type[Any], body: dict[str, Any], context: dict[str, Any] | None = None) -> Any:
    """``model.model_validate(body)``, a refusal raised as the `ApiError` the servers answer with."""
    try:
        return model.model_validate(body, context=context)
    except ValidationError as exc:
        raise refusal(exc) from None


def wire(request: BaseModel, **kw: Any) -> dict[str, Any]:
    """A request's JSON body: only what differs from the defaults (the server fills in its own)."""
    return request.model_dump(mode="json", exclude_defaults=True, **kw)
