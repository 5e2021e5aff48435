"""The exec server's request bodies: the protocol's models, then what only this node can decide.

A body is validated once by its model (`protocol.parse`: types, patterns, static ranges; a refusal
is the 400 the servers have always answered). What depends on this node is checked here, after the
model: its timeouts, output and file limits, lifetime, CPUs and memory, and its allowed networks
(403). The answer is the request with this node's defaults filled in, handed to the operations.
Whether this node knows the container is the operation's business (404).
"""

from __future__ import annotations

import os
from typing import Any

from swe_rl.fleet.exec.config import ExecConfig, node_memory, parse_bytes
from swe_rl.fleet.protocol import (
    ApiError,
    CreateOptions,
    CreateRequest,
    DiffRequest,
    EvaluateRequest,
    ExecRequest,
    ReadFileRequest,
    TouchRequest,
    WarmRequest,
    WriteFileRequest,
    parse,
)

MIN_MEMORY = 6 << 20  # the Docker daemon's own minimum
DEFAULT_EVAL_TIMEOUT = 1800.0


def create_request(body: dict[str, Any], cfg: ExecConfig) -> CreateRequest:
    """A create body with this node's defaults filled in."""
    req: CreateRequest = parse(CreateRequest, body)
    return req.model_copy(
        update={
            **_create_fields(req, cfg),
            "ttl": _within(req, "ttl", cfg.max_lifetime, lo=1, hi=cfg.max_lifetime),
            "idle_ttl": _within(req, "idle_ttl", cfg.idle_ttl, lo=1, hi=cfg.max_lifetime),
        }
    )


def warm_request(body: dict[str, Any], cfg: ExecConfig) -> WarmRequest:
    req: WarmRequest = parse(WarmRequest, body)
    ttl = _within(req, "ttl", cfg.warm_ttl, lo=1, hi=cfg.max_lifetime)
    return req.model_copy(update={**_create_fields(req, cfg), "ttl": ttl})


def _create_fields(req: CreateOptions, cfg: ExecConfig) -> dict[str, Any]:
    if req.network is True and not cfg.allow_network:
        raise ApiError(403, "this exec server does not allow networked containers")
    if isinstance(req.network, str) and req.network not in cfg.networks:
        raise ApiError(
            403,
            f"network {req.network!r} is not allowed on this node (allowed: "
            f"{', '.join(cfg.networks) or 'none'}; set SWE_EXEC_NETWORKS)",
            network=req.network,
        )
    if req.memory is not None:
        _check_memory(req.memory)
    return {
        "workdir": req.workdir or "/testbed",
        "memory": req.memory or str(cfg.memory),
        "cpus": _within(req, "cpus", cfg.cpus, lo=0.01, hi=float(os.cpu_count() or 1)),
        "pids_limit": int(_within(req, "pids_limit", cfg.pids_limit, lo=16, hi=1 << 20)),
    }


def exec_request(body: dict[str, Any], cfg: ExecConfig) -> ExecRequest:
    req: ExecRequest = parse(ExecRequest, body)
    timeout = _within(req, "timeout", cfg.default_timeout, lo=0.1, hi=cfg.max_timeout)
    limit = _within(req, "max_output_bytes", cfg.max_output_bytes, lo=64, hi=cfg.max_eval_output_bytes)
    return req.model_copy(update={"timeout": timeout, "max_output_bytes": int(limit)})


def diff_request(body: dict[str, Any]) -> DiffRequest:
    req: DiffRequest = parse(DiffRequest, body)
    return req


def write_file_request(body: dict[str, Any]) -> WriteFileRequest:
    req: WriteFileRequest = parse(WriteFileRequest, body)
    return req


def read_file_request(body: dict[str, Any], cfg: ExecConfig) -> ReadFileRequest:
    req: ReadFileRequest = parse(ReadFileRequest, body)
    limit = _within(req, "max_bytes", cfg.max_file_bytes, lo=0, hi=cfg.max_file_bytes)
    return req.model_copy(update={"max_bytes": int(limit)})


def evaluate_request(body: dict[str, Any], cfg: ExecConfig) -> EvaluateRequest:
    req: EvaluateRequest = parse(EvaluateRequest, body)
    timeout = _within(req, "timeout", DEFAULT_EVAL_TIMEOUT, lo=1, hi=cfg.max_timeout)
    limit = _within(req, "max_output_bytes", cfg.max_eval_output_bytes, lo=1024, hi=cfg.max_eval_output_bytes)
    return req.model_copy(update={"timeout": timeout, "max_output_bytes": int(limit)})


def container_ids(body: dict[str, Any]) -> list[str]:
    req: TouchRequest = parse(TouchRequest, body)
    return req.container_ids


def _within(req: Any, key: str, default: float, *, lo: float, hi: float) -> float:
    """The field's value (this node's default when absent) inside this node's bounds."""
    value = getattr(req, key)
    if value is None:
        return float(default)
    if not lo <= value <= hi:
        raise ApiError(400, f"{key} must be between {lo} and {hi}")
    return float(value)


def _check_memory(memory: str) -> None:
    """A memory limit Docker accepts and this node can give (checked before anything starts)."""
    wanted = parse_bytes(memory)
    total, _ = node_memory()
    if wanted < MIN_MEMORY:
        raise ApiError(400, f"memory {memory!r} is below Docker's minimum of 6m")
    if total and wanted > total:
        raise ApiError(400, f"memory {memory!r} is more than this node has ({total >> 20}m)")
