"""Checks of the exec server's request bodies, field by field, into the typed requests of the protocol.

Every refusal is an `ApiError` 400 (403 for what this node does not allow) naming the field, with
the same words the servers have always used (tests/fleet/test_bad_input.py is the contract).
Fields are checked in a fixed order, so a body with several mistakes always gets the same answer.
The container id's syntax is checked here; whether this node knows the container, by the operation.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from typing import Any

from swe_rl.fleet.exec.config import MEMORY_RE, ExecConfig, node_memory, parse_bytes
from swe_rl.fleet.exec.containers import CONTAINER_ID_RE
from swe_rl.fleet.protocol import (
    ApiError,
    CreateRequest,
    DiffRequest,
    EvaluateRequest,
    ExecRequest,
    ReadFileRequest,
    WarmRequest,
    WriteFileRequest,
)

LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:@/+-]{0,128}$")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,255}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
_BASE_RE = re.compile(r"^[A-Za-z0-9_./^~-]{1,200}$")


# --------------------------------------------------------------------------- typed requests


def create_request(body: dict[str, Any], cfg: ExecConfig) -> CreateRequest:
    """A create body with this node's defaults filled in."""
    fields = _create_fields(body, cfg)
    return CreateRequest(
        **fields,
        lease_id=_opt_label(body, "lease_id"),
        owner=_opt_label(body, "owner"),
        ttl=_opt_number(body, "ttl", cfg.max_lifetime, lo=1, hi=cfg.max_lifetime),
        idle_ttl=_opt_number(body, "idle_ttl", cfg.idle_ttl, lo=1, hi=cfg.max_lifetime),
    )


def warm_request(body: dict[str, Any], cfg: ExecConfig) -> WarmRequest:
    create = CreateRequest(**_create_fields(body, cfg))
    count = int(_opt_number(body, "count", 1, lo=0, hi=1 << 16, integer=True))
    return WarmRequest(create, count, _opt_number(body, "ttl", cfg.warm_ttl, lo=1, hi=cfg.max_lifetime))


def _create_fields(body: dict[str, Any], cfg: ExecConfig) -> dict[str, Any]:
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
    return {
        "image": image,
        "memory": str(memory),
        "cpus": cpus,
        "pids_limit": pids,
        "network": network,
        "workdir": workdir,
        "env": env,
    }


def exec_request(body: dict[str, Any], cfg: ExecConfig) -> ExecRequest:
    command = _require_str(body, "command")
    timeout = _opt_number(body, "timeout", cfg.default_timeout, lo=0.1, hi=cfg.max_timeout)
    env = _opt_env(body)
    max_out = int(
        _opt_number(body, "max_output_bytes", cfg.max_output_bytes, lo=64, hi=cfg.max_eval_output_bytes)
    )
    user = _opt_user(body)
    separate = _opt_bool(body, "separate_stderr", False)  # default: one interleaved "output"
    cid = _container_id(body)
    return ExecRequest(cid, command, timeout, _opt_path(body, "workdir"), env, max_out, user, separate)


def diff_request(body: dict[str, Any]) -> DiffRequest:
    base = body.get("base") or "HEAD"
    if not isinstance(base, str) or not _BASE_RE.match(base):
        raise ApiError(400, "base must be a git revision")
    record = _opt_bool(body, "record_baseline", False)
    cid = _container_id(body)
    return DiffRequest(cid, base, _opt_path(body, "workdir"), record)


def write_file_request(body: dict[str, Any]) -> WriteFileRequest:
    data = _decode_content(body)
    mode = int(_opt_number(body, "mode", 0o644, lo=0, hi=0o7777, integer=True))
    cid = _container_id(body)
    path = _require_path(body, "path")
    return WriteFileRequest(cid, path, data, mode, _opt_bool(body, "create_dirs", True))


def read_file_request(body: dict[str, Any], cfg: ExecConfig) -> ReadFileRequest:
    limit = int(_opt_number(body, "max_bytes", cfg.max_file_bytes, lo=0, hi=cfg.max_file_bytes))
    cid = _container_id(body)
    return ReadFileRequest(cid, _require_path(body, "path"), limit)


def evaluate_request(body: dict[str, Any], cfg: ExecConfig) -> EvaluateRequest:
    patch = body.get("patch", "")
    if not isinstance(patch, str):
        raise ApiError(400, "patch must be a string")
    eval_script = _require_str(body, "eval_script")
    timeout = _opt_number(body, "timeout", 1800.0, lo=1, hi=cfg.max_timeout)
    max_out = int(
        _opt_number(
            body, "max_output_bytes", cfg.max_eval_output_bytes, lo=1024, hi=cfg.max_eval_output_bytes
        )
    )
    cid = _container_id(body)
    return EvaluateRequest(cid, eval_script, patch, timeout, _opt_path(body, "workdir"), max_out)


def container_ids(body: dict[str, Any]) -> list[str]:
    ids = body.get("container_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ApiError(400, "container_ids must be a list of strings")
    return ids


# --------------------------------------------------------------------------- fields


def _container_id(body: dict[str, Any]) -> str:
    value = body.get("container_id")
    if not isinstance(value, str) or not CONTAINER_ID_RE.match(value):
        raise ApiError(400, "container_id must be a container id or name (letters, digits, '_', '.', '-')")
    return value


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
        raise ApiError(
            403,
            f"network {value!r} is not allowed on this node (allowed: "
            f"{', '.join(cfg.networks) or 'none'}; set SWE_EXEC_NETWORKS)",
            network=value,
        )
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


def _opt_number(
    body: dict[str, Any], key: str, default: float, *, lo: float, hi: float, integer: bool = False
) -> float:
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
        raise ApiError(
            400, "user must be a user name or uid[:gid] (letters, digits and _.-, at most 32 each)"
        )
    return value


def _opt_env(body: dict[str, Any]) -> dict[str, str]:
    env = body.get("env")
    if env is None:
        return {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and ENV_NAME_RE.match(k) and isinstance(v, str) and "\x00" not in v
        for k, v in env.items()
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
