"""In-memory stand-in for the Docker SDK, for load tests of the fleet only.

`python -m swe_rl.fleet.fakes.exec_server` runs an exec server over this instead of Docker:
containers are dictionary entries, commands are not run (exec answers a canned
result after a configurable delay), files written can be read back. It lets
tens of exec servers run on loopback so the pool server and client can be
measured at thousands of leases without a Docker node. It is never the
default, never deployed to a node, and the exec server logs loudly when it is on.

Settings (environment):
- `SWE_EXEC_FAKE_LATENCY_MS`: `create,exec,destroy` in milliseconds, or one
  number for all three (default `0`).
- `SWE_EXEC_FAKE_IMAGES`: comma-separated images the fake node "has"; empty
  (default) means every image exists.
"""

from __future__ import annotations

import io
import os
import secrets
import tarfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import docker.errors


@dataclass
class Latency:
    create: float = 0.0
    exec: float = 0.0
    destroy: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Latency:
        parts = [float(p) / 1000 for p in text.split(",") if p.strip()] or [0.0]
        if len(parts) == 1:
            parts *= 3
        if len(parts) != 3:
            raise ValueError("SWE_EXEC_FAKE_LATENCY_MS is 'create,exec,destroy' or one number (milliseconds)")
        return cls(*parts)


def _pause(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


@dataclass
class _Image:
    tags: list[str]


@dataclass
class FakeContainer:
    client: FakeDockerClient
    id: str
    name: str
    labels: dict[str, str]
    image: _Image
    attrs: dict[str, Any]
    status: str = "created"
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def start(self) -> None:
        self.status = "running"

    def remove(self, force: bool = False) -> None:
        self.client.api.remove_container(self.id, force=force)


class _Containers:
    def __init__(self, client: FakeDockerClient) -> None:
        self.client = client

    def create(
        self,
        image: str,
        command: Any = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        working_dir: str | None = None,
        **kw: Any,
    ) -> FakeContainer:
        self.client.images.get(image)
        _pause(self.client.latency.create)
        cid = secrets.token_hex(32)
        host = {
            "Memory": kw.get("mem_limit"),
            "NanoCpus": kw.get("nano_cpus"),
            "PidsLimit": kw.get("pids_limit"),
            "NetworkMode": kw.get("network_mode") or "default",
            "Init": kw.get("init", False),
        }
        c = FakeContainer(
            self.client,
            cid,
            name or cid[:12],
            dict(labels or {}),
            _Image([image]),
            {"Config": {"WorkingDir": working_dir or "/", "Env": kw.get("environment")}, "HostConfig": host},
        )
        with self.client.lock:
            self.client.store[cid] = c
        return c

    def get(self, cid: str) -> FakeContainer:
        with self.client.lock:
            c = self.client.store.get(cid)
        if c is None:
            raise docker.errors.NotFound(f"No such container: {cid}")
        return c

    def list(
        self, all: bool = False, filters: dict[str, Any] | None = None, ignore_removed: bool = False
    ) -> list[FakeContainer]:
        wanted = [f.split("=", 1) for f in (filters or {}).get("label", [])]
        with self.client.lock:
            items = list(self.client.store.values())
        return [c for c in items if (all or c.status == "running") and _matches(c.labels, wanted)]


def _matches(labels: dict[str, str], wanted: Iterable[list[str]]) -> bool:
    """Docker's label filter: `key=value` must match, a bare `key` must be present."""
    return all((labels.get(w[0]) == w[1]) if len(w) > 1 else (w[0] in labels) for w in wanted)


class _Api:
    def __init__(self, client: FakeDockerClient) -> None:
        self.client = client

    def remove_container(self, cid: str, force: bool = False) -> None:
        _pause(self.client.latency.destroy)
        with self.client.lock:
            if self.client.store.pop(cid, None) is None:
                raise docker.errors.NotFound(f"No such container: {cid}")

    def put_archive(self, cid: str, path: str, data: bytes) -> bool:
        c = self.client.containers.get(cid)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                fh = tar.extractfile(m)
                c.files[os.path.normpath(os.path.join(path, m.name))] = (fh.read() if fh else b"", m.mode)
        return True

    def get_archive(self, cid: str, path: str) -> tuple[Iterable[bytes], dict[str, Any]]:
        c = self.client.containers.get(cid)
        if path not in c.files:
            raise docker.errors.NotFound(f"Could not find the file {path} in container {cid}")
        data, mode = c.files[path]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(os.path.basename(path))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        return [buf.getvalue()], {"name": os.path.basename(path), "size": len(data), "mode": mode}


class _Images:
    def __init__(self, client: FakeDockerClient, images: list[str]) -> None:
        self.client, self.known = client, set(images)

    def get(self, image: str) -> _Image:
        if self.known and image not in self.known:
            raise docker.errors.ImageNotFound(f"No such image: {image}")
        return _Image([image])

    def list(self) -> list[_Image]:
        if self.known:
            return [_Image([t]) for t in sorted(self.known)]
        with self.client.lock:
            return [_Image([t]) for t in sorted({c.image.tags[0] for c in self.client.store.values()})]

    def pull(self, image: str) -> _Image:
        raise docker.errors.APIError(f"the memory backend cannot pull {image}")


@dataclass
class FakeExecResult:
    """Same fields as the exec server's CommandOutcome."""

    returncode: int
    output: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    output_bytes: int
    duration: float


class FakeExecutor:
    """Answers every command with returncode 0 after the exec latency; a one-line `echo X` prints X."""

    def __init__(self, client: FakeDockerClient) -> None:
        self.client = client

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
    ) -> FakeExecResult:
        start = time.monotonic()
        c = self.client.containers.get(container_id)
        if c.status != "running":
            raise docker.errors.APIError("container is not running", response=_Resp409())
        _pause(min(self.client.latency.exec, timeout))
        output = (command[5:] + "\n").encode() if command.startswith("echo ") and "\n" not in command else b""
        return FakeExecResult(
            returncode=0,
            output=output[:max_output],
            stderr=b"",
            timed_out=False,
            truncated=len(output) > max_output,
            output_bytes=len(output),
            duration=time.monotonic() - start,
        )


class _Resp409:
    status_code = 409
    reason = "Conflict"
    url = ""


class FakeDockerClient:
    """The slice of `docker.DockerClient` the exec server uses, in memory."""

    def __init__(self, latency: Latency | None = None, images: list[str] | None = None) -> None:
        self.latency = latency or Latency()
        self.lock = threading.Lock()
        self.store: dict[str, FakeContainer] = {}
        self.containers = _Containers(self)
        self.api = _Api(self)
        self.images = _Images(self, images or [])

    @classmethod
    def from_env(cls) -> FakeDockerClient:
        images = [i.strip() for i in os.environ.get("SWE_EXEC_FAKE_IMAGES", "").split(",") if i.strip()]
        return cls(Latency.parse(os.environ.get("SWE_EXEC_FAKE_LATENCY_MS", "0")), images)

    def make_executor(self) -> FakeExecutor:
        return FakeExecutor(self)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass
