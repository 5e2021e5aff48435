"""The fleet's answers: the JSON objects of 200 answers, as models the client parses them into.

Lax (a server may answer 1 for 1.0) and unknown fields ignored, so a newer server's extra keys never
break an older client. The servers build these objects as plain dicts (no per-answer model on their
hot paths); the client parses every answer it reads into them, so its tests check real answers.
The requests and the error mapping are in `swe_rl.fleet.protocol`.
"""

from __future__ import annotations

import base64

from pydantic import BaseModel, ConfigDict


class Answer(BaseModel):
    """A 200 answer's JSON object as the client reads it (lax, unknown fields ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ExecResponse(Answer):
    returncode: int
    output: str
    timed_out: bool
    truncated: bool
    output_bytes: int
    duration: float
    stderr: str | None = None
    """Only with ``separate_stderr``."""
    stderr_truncated: bool | None = None


class DiffResponse(Answer):
    patch: str = ""
    encoding: str = "utf-8"
    """"utf-8", or "base64" when the patch is not valid UTF-8."""
    baseline: str = ""
    """Only when a baseline was recorded."""

    def text(self) -> str:
        """The patch as text (bytes that are not UTF-8 replaced, so what is text stays readable)."""
        if self.encoding == "base64":
            return base64.b64decode(self.patch).decode("utf-8", errors="replace")
        return self.patch


class ReadFileResponse(Answer):
    content: str
    encoding: str = "utf-8"
    """"utf-8", or "base64" when the file is not valid UTF-8."""
    path: str = ""
    size: int = 0
    mode: int = 0

    def data(self) -> bytes:
        return base64.b64decode(self.content) if self.encoding == "base64" else self.content.encode("utf-8")


class EvaluateResponse(Answer):
    apply_status: str
    """"applied", "failed" (no strategy applied the patch) or "empty" (no patch)."""
    apply_strategy: str | None = None
    apply_output: str = ""
    returncode: int | None = None
    test_log: str = ""
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0


class LeaseResponse(Answer):
    """``POST /allocate``: the lease (the pool's `LeaseRecord.public`)."""

    lease_id: str
    node: str = ""
    container_id: str = ""
    image: str = ""
    instance_id: str | None = None
    workdir: str = ""
    expires_at: float = 0.0
    warm: bool | None = None
    """Handed over from a node's warm pool (None: the pool did not say)."""
    image_id: str = ""
    """The ID of the image the container was made from ('' when the pool or node did not say)."""
    credential: str = ""
    """The lease's own credential (swe_rl/fleet/lease_credential.py); empty from a pool without them."""
    credential_expires_at: float = 0.0


class CredentialResponse(Answer):
    """``POST /credential``: a renewed credential for a lease."""

    credential: str
    credential_expires_at: float


class HeartbeatResponse(Answer):
    """``POST /heartbeat``; a batch also names the leases it could not extend."""

    expires_at: float
    node_healthy: bool | None = None
    unknown: list[str] = []
    lost: dict[str, str] = {}
    """Lease id → why its container is gone."""
    node_down: list[str] = []
