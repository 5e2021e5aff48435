"""slime's agent-layer `Sandbox` on our fleet: one pool lease per sandbox.

Upstream slime (`slime/agent/sandbox.py` at the pinned commit) drives its
coding-agent harnesses through a small async protocol; `FleetSandbox` offers
it structurally (slime is never imported here):

    async with FleetSandbox("my/image:tag", network=True) as sb:
        code, out, err = await sb.exec("id -un", user="agent", env={"A": "1"}, timeout=60)
        await sb.write_file("/tmp/node.tar", Path("node.tar"))   # str, bytes or a host Path
        text = await sb.read_file("/tmp/out.log")

How it behaves, and why:
- Enter allocates a lease (image, network, resources) and heartbeats it; exit
  closes it whatever the exit, cancellation included (the close is shielded).
- `exec` returns (exit_code, stdout, stderr) as separate streams. `check=True`
  raises `SandboxCommandError` (a RuntimeError, as upstream raises) on a
  non-zero exit; a command past its timeout raises `SandboxTimeout` whatever
  `check` is (upstream's backend raises there too). `timeout <= 0` means the
  longest timeout the fleet allows.
- `idempotent` picks the retry policy: True lets a call whose answer was lost
  be sent again; False never re-sends it once it may have reached the pool.
- `write_file` streams large content: it is cut into chunks staged in the
  container, then joined by a command run as `user`, so the file belongs to
  that user and that user's permissions apply. `read_file` returns text ("" for
  a missing file, as upstream); a fleet failure raises instead of reading as
  empty, so infrastructure trouble is never mistaken for content.
- Relative paths are taken from the user's home, commands start in `workdir`.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import secrets
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.errors import BadRequest, FileNotFound, FleetError
from swe_rl.fleet.settings import EnvVar, field_types, prefixed, read_env

log = logging.getLogger(__name__)

ExecResult = tuple[int, str, str]
FileContent = str | bytes | Path

STAGING_ROOT = "/tmp/.swe-rl-upload"
_background: set[asyncio.Task[Any]] = set()
"""Closes still running after their caller was cancelled (kept referenced until done)."""


class SandboxCommandError(RuntimeError):
    """exec(check=True) of a command that exited non-zero."""

    def __init__(self, message: str, *, exit_code: int, stdout: str, stderr: str) -> None:
        super().__init__(message)
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr


class SandboxTimeout(RuntimeError):
    """A command ran past its timeout (it was killed in the container)."""

    def __init__(self, message: str, *, stdout: str, stderr: str) -> None:
        super().__init__(message)
        self.stdout, self.stderr = stdout, stderr


class FleetSandboxConfig(BaseModel):
    """Container and transfer settings; `from_env()` reads `SWE_FLEET_SANDBOX_<FIELD>`."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    network: bool | str = False
    """Network of the container: false (none), true (the node's default bridge) or a network name the
    node allows. The coding-agent CLIs must reach the adapter on the training host, so they need one."""
    memory: str | None = None
    """Memory limit (e.g. "8g"); the node's default when unset."""
    cpus: float | None = None
    """CPU limit; the node's default when unset."""
    pids_limit: int | None = None
    """Process limit; the node's default when unset."""
    workdir: str = "/"
    """Directory commands start in (upstream's commands `cd` where they need to)."""
    chunk_bytes: int = 8 << 20
    """write_file sends content in chunks of this size (each one HTTP call)."""
    max_output_bytes: int = 16 << 20
    """Output kept per stream and exec (head and tail beyond it); at most the node's eval output cap."""
    max_timeout: float = 4 * 3600.0
    """Timeout used for `timeout <= 0` (no limit asked); at most the node's max_timeout."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> FleetSandboxConfig:
        """Defaults < the variables of `SANDBOX_ENV` (from `env`, default the process environment) < overrides."""
        return cls(**{**read_env(SANDBOX_ENV, field_types(cls), env), **overrides})


def parse_network(text: str) -> bool | str:
    """ "true"/"1"/"bridge" → the node's default network, "false"/"0"/"none" → none, anything else → a name."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on", "bridge", "default"):
        return True
    if lowered in ("0", "false", "no", "off", "none"):
        return False
    return text.strip()


SANDBOX_ENV: dict[str, EnvVar] = prefixed(
    "SWE_FLEET_SANDBOX_",
    FleetSandboxConfig.model_fields,
    network=EnvVar("SWE_FLEET_SANDBOX_NETWORK", parse=parse_network),
)
"""The variable of each `FleetSandboxConfig` field: `SWE_FLEET_SANDBOX_<FIELD>`."""
AGENT_GENERATE_ENV: dict[str, EnvVar] = {
    "network": EnvVar("SWE_FLEET_SANDBOX_NETWORK", parse=parse_network),
    "eval_network": EnvVar("SWE_FLEET_SANDBOX_EVAL_NETWORK", parse=parse_network),
}
"""Read by `swe_rl.slime.agent_generate`: networks of the agent's and of the grading container."""


class FleetSandbox:
    """slime's `Sandbox` protocol over one lease of the pool (see the module docstring)."""

    sandbox_id: str

    def __init__(
        self,
        image: str,
        *,
        network: bool | str | None = None,
        instance_id: str | None = None,
        config: FleetSandboxConfig | None = None,
        client: EnvClient | None = None,
        client_config: EnvClientConfig | None = None,
    ) -> None:
        self.image = image
        self.config = config or FleetSandboxConfig.from_env()
        if network is not None:
            self.config = self.config.model_copy(update={"network": network})
        self.instance_id = instance_id
        self._given_client = client
        self._client_config = client_config
        self._client: EnvClient | None = None
        self._lease: Lease | None = None
        self.sandbox_id = ""

    def __repr__(self) -> str:
        return f"FleetSandbox({self.image!r}, sandbox_id={self.sandbox_id!r})"

    # ---- lifecycle

    async def __aenter__(self) -> FleetSandbox:
        self._client = self._given_client or EnvClient(self._client_config or EnvClientConfig.from_env())
        cfg = self.config
        opts: dict[str, Any] = {"workdir": cfg.workdir}
        if cfg.network:
            opts["network"] = cfg.network
        for key in ("memory", "cpus", "pids_limit"):
            if getattr(cfg, key) is not None:
                opts[key] = getattr(cfg, key)
        try:
            self._lease = await self._client.allocate(self.image, instance_id=self.instance_id, **opts)
        except BaseException:
            await self._shutdown()  # a cancelled allocate is released by request id in the client
            raise
        self._lease.start_heartbeat()
        self.sandbox_id = self._lease.lease_id
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Close the lease (and our own client); runs to its end even if the caller is cancelled again."""
        lease, self._lease = self._lease, None
        client = self._client
        self._client = None
        if client is None:
            return
        owned = client is not self._given_client

        async def close() -> None:
            try:
                if lease is not None:
                    try:
                        await lease.close()
                    except FleetError as exc:  # never raised out of __aexit__, as upstream
                        log.warning(
                            "close of sandbox %s failed (the pool reclaims it after its TTL): %s",
                            lease.lease_id,
                            exc,
                        )
            finally:
                if owned:
                    await client.aclose()

        task = asyncio.ensure_future(close())
        _background.add(task)
        task.add_done_callback(_background.discard)
        await asyncio.shield(task)

    def _need_lease(self) -> Lease:
        if self._lease is None:
            raise RuntimeError("FleetSandbox is not entered (use `async with FleetSandbox(...) as sb`)")
        return self._lease

    # ---- protocol

    async def exec(
        self,
        cmd: str,
        *,
        user: str = "root",
        env: dict[str, str] | None = None,
        timeout: int = 120,
        check: bool = False,
        idempotent: bool = True,
    ) -> ExecResult:
        lease = self._need_lease()
        seconds = float(timeout) if timeout and timeout > 0 else self.config.max_timeout
        res = await lease.exec(
            cmd,
            timeout=seconds,
            env=env or None,
            user=user,
            separate_stderr=True,
            idempotent=idempotent,
            max_output_bytes=self.config.max_output_bytes,
        )
        stdout, stderr = res.output, res.stderr or ""
        if res.timed_out:
            raise SandboxTimeout(
                f"fleet exec timed out after {seconds:g}s: {cmd[:120]}", stdout=stdout, stderr=stderr
            )
        if check and res.returncode != 0:
            raise SandboxCommandError(
                f"fleet exec failed (exit={res.returncode}): {cmd[:120]}\n{stderr[:400]}",
                exit_code=res.returncode,
                stdout=stdout,
                stderr=stderr,
            )
        return res.returncode, stdout, stderr

    async def write_file(self, sandbox_path: str, content: FileContent, *, user: str = "root") -> None:
        lease = self._need_lease()
        path = _absolute(sandbox_path, user)
        if isinstance(content, str):
            content = content.encode("utf-8")
        if isinstance(content, (bytes, bytearray, memoryview)):
            data = bytes(content)
            if user == "root" and len(data) <= self.config.chunk_bytes:  # the common case: one call
                await lease.write_file(path, data, idempotent=True)
                return
            chunks: Iterator[bytes] | None = _split(data, self.config.chunk_bytes)
        elif isinstance(content, Path):
            if not content.is_file():
                raise FileNotFoundError(f"no such host file: {content}")
            chunks = None
        else:
            raise TypeError(
                f"write_file content must be str, bytes or pathlib.Path, not {type(content).__name__}"
            )

        stage = f"{STAGING_ROOT}/{secrets.token_hex(8)}"
        try:
            count = 0
            if chunks is not None:
                for chunk in chunks:
                    await lease.write_file(f"{stage}/{count:06d}", chunk, idempotent=True)
                    count += 1
            else:
                count = await self._upload_host_file(lease, content, stage)  # type: ignore[arg-type]
            parts = f"{stage}/*" if count else "/dev/null"
            join = (
                f"mkdir -p -- {shlex.quote(posixpath.dirname(path))} && cat -- {parts} > {shlex.quote(path)}"
            )
            await self.exec(join, user=user, timeout=600, check=True, idempotent=True)
        finally:
            if lease is self._lease:
                try:
                    await self.exec(f"rm -rf -- {stage}", user="root", timeout=120, idempotent=True)
                except (FleetError, SandboxTimeout) as exc:  # the original outcome matters more
                    log.warning("could not remove staged upload %s: %s", stage, exc)

    async def _upload_host_file(self, lease: Lease, host_path: Path, stage: str) -> int:
        """Send a host file chunk by chunk (never all of it in memory); returns the number of chunks."""
        count = 0
        with open(host_path, "rb") as fh:
            while True:
                chunk = await asyncio.to_thread(fh.read, self.config.chunk_bytes)
                if not chunk:
                    return count
                await lease.write_file(f"{stage}/{count:06d}", chunk, idempotent=True)
                count += 1

    async def read_file(self, sandbox_path: str, *, user: str = "root") -> str:
        lease = self._need_lease()
        path = _absolute(sandbox_path, user)
        if user != "root":  # the read itself is done by the node: check this user may read it
            code, _, _ = await self.exec(f"test -r {shlex.quote(path)}", user=user, timeout=60)
            if code != 0:
                return ""
        try:
            data = await lease.read_file(path)
        except (FileNotFound, BadRequest) as exc:  # missing, a directory, too large: "" as upstream
            log.debug("read_file %s: %s", path, exc)
            return ""
        return data.decode("utf-8", errors="replace")


def _absolute(path: str, user: str) -> str:
    if path.startswith("/"):
        return posixpath.normpath(path)
    home = "/root" if user in ("root", "0") else f"/home/{user}"
    return posixpath.normpath(posixpath.join(home, path))


def _split(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
