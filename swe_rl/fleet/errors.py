"""The fleet's typed errors: one tree the client maps every HTTP answer onto (`error_for`).

Everything under `FleetUnavailable` is the fleet's fault (pool unreachable, node down, container gone,
fleet full, image missing, timeouts): the plugin removes such samples instead of scoring them.
`BadRequest` (`IsADirectory`, `CommandRefused`) and `FileNotFound` are the caller's business. Every
environment raises this tree (the in-process one too), so one set of `except` clauses serves both.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FleetError",
    "Forbidden",
    "FleetUnavailable",
    "LeaseLost",
    "FleetFull",
    "ImageNotFound",
    "NetworkFull",
    "BadRequest",
    "FileNotFound",
    "IsADirectory",
    "CommandRefused",
    "TlsRefused",
    "error_for",
]


class FleetError(Exception):
    """Any failure reported by the pool or on the way to it."""

    def __init__(
        self, message: str, *, status: int | None = None, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {}


class FleetUnavailable(FleetError):
    """Infrastructure failure (pool unreachable, node down, 5xx, timeout): not the policy's fault."""


class LeaseLost(FleetUnavailable):
    """The lease or its container is gone (expired, reclaimed, container died)."""


class FleetFull(FleetUnavailable):
    """Every node stayed at its cap until the allocate deadline."""


class ImageNotFound(FleetUnavailable):
    """No healthy node has the image."""


class NetworkFull(FleetUnavailable):
    """The container's network has no free address on any node that could take it (a subnet too
    small for the containers on it): allocate fails at once with that reason, it is not retried."""


class TlsRefused(FleetError):
    """A TLS connection failed on a setting, not a passing fault: the server's certificate is not trusted
    (another CA than the client's `ca_file`), names another host, or the server speaks plain HTTP. Never
    retried, never an `env_error` of one rollout: every call would fail the same way."""


class BadRequest(FleetError):
    """The pool refused the request (4xx); carries the server's message."""


class Forbidden(BadRequest):
    """403: the call on a lease lacked its credential, or the credential was expired, forged or for
    another lease (swe_rl/fleet/lease_credential.py). Never retried."""


class FileNotFound(FleetError):
    """read_file of a path that does not exist in the container."""


class IsADirectory(BadRequest):
    """read_file or write_file of a path that is a directory."""


class CommandRefused(BadRequest):
    """exec refused before it ran (4xx: too large, a NUL byte, an unknown user, ...): the caller's doing."""


"""read_file of a path that does not exist."""


def error_for(op: str, status: int, body: dict[str, Any]) -> FleetError:
    """The one place HTTP answers become typed errors (the servers say "directory" only in text)."""
    message = f"{op}: {body.get('error') or f'HTTP {status}'}"
    if status == 403 and body.get("credential_refused"):
        return Forbidden(message, status=status, body=body)
    if status == 404 and op == "allocate":
        return ImageNotFound(message, status=status, body=body)
    if status == 404 and op == "read_file" and not body.get("lease_lost"):
        return FileNotFound(message, status=status, body=body)
    if (
        status == 400
        and op in ("read_file", "write_file")
        and ("is a directory" in message or "names a directory" in message)
    ):
        return IsADirectory(message, status=status, body=body)
    if op == "exec" and 400 <= status < 500 and status not in (404, 409, 410, 429):
        return CommandRefused(message, status=status, body=body)
    if status in (404, 409, 410) and op != "allocate":
        return LeaseLost(message, status=status, body=body)
    if status == 429:
        return FleetFull(message, status=status, body=body)
    if body.get("network_full"):
        return NetworkFull(message, status=status, body=body)
    if status >= 500:
        return FleetUnavailable(message, status=status, body=body)
    return BadRequest(message, status=status, body=body)
