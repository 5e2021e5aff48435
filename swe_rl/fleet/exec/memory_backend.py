"""The in-memory backend (`SWE_EXEC_BACKEND=memory`): no containers at all, for load tests of the fleet.

Containers are dictionary entries, commands are not run (exec answers returncode 0 after a
configurable delay; a one-line `echo X` prints X), files written can be read back. It lets tens of
exec servers run on loopback so the pool server and client can be measured at thousands of leases
without a Docker node (`swe_rl.fleet.fakes.simulated_fleet`). Never the default; the server logs
loudly when it is on.

Settings (environment):
- `SWE_EXEC_FAKE_LATENCY_MS`: `create,exec,destroy` in milliseconds, or one number for all three
  (default `0`).
- `SWE_EXEC_FAKE_IMAGES`: comma-separated images the node "has"; empty (default): every image exists.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import secrets
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from swe_rl.fleet.exec.backend import (
    BackendError,
    Conflict,
    ContainerInfo,
    ContainerSpec,
    ImageInfo,
    ImageMissing,
    NotFound,
    PathStat,
)
from swe_rl.fleet.exec.executor import CommandOutcome
from swe_rl.fleet.exec.images import BackendImages

if TYPE_CHECKING:
    from swe_rl.fleet.exec.config import ExecConfig

log = logging.getLogger("swe_exec_server")
_warned = threading.Event()


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
class _Box:
    info: ContainerInfo
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)


def _image_info(tag: str) -> ImageInfo:
    return ImageInfo(id="sha256:" + hashlib.sha256(tag.encode()).hexdigest(), tags=(tag,), size=0)


class MemoryBackend:
    """A `NodeBackend` in a dictionary."""

    name = "memory"

    def __init__(self, latency: Latency | None = None, images: list[str] | None = None) -> None:
        self.latency = latency or Latency()
        self.lock = threading.Lock()
        self.boxes: dict[str, _Box] = {}
        self.images = set(images or [])
        """The images this node has; empty: every image."""
        self.committed: dict[str, ImageInfo] = {}
        self.committed_files: dict[str, dict[str, tuple[bytes, int]]] = {}
        """A committed image's files: a container created from it starts with a copy."""

    @classmethod
    def from_config(cls, config: ExecConfig, env: Mapping[str, str]) -> MemoryBackend:
        if not _warned.is_set():  # loudly, once per process (a simulated fleet runs many in one)
            _warned.set()
            for _ in range(3):
                log.warning("in-memory backend: NO CONTAINERS, commands are not run (load tests only)")
        images = [i.strip() for i in env.get("SWE_EXEC_FAKE_IMAGES", "").split(",") if i.strip()]
        return cls(Latency.parse(env.get("SWE_EXEC_FAKE_LATENCY_MS", "0")), images)

    def _box(self, container_id: str) -> _Box:
        with self.lock:
            box = self.boxes.get(container_id)
        if box is None:
            raise NotFound(f"No such container: {container_id}")
        return box

    # containers

    def create_container(self, spec: ContainerSpec) -> ContainerInfo:
        image = self.image_info(spec.image)
        _pause(self.latency.create)
        cid = secrets.token_hex(32)
        info = ContainerInfo(
            cid, spec.name or cid[:12], spec.image, dict(spec.labels), spec.workdir, "created", image.id
        )
        with self.lock:
            self.boxes[cid] = _Box(info, dict(self.committed_files.get(spec.image, {})))
        return info

    def start_container(self, container_id: str) -> None:
        box = self._box(container_id)
        box.info = replace(box.info, status="running")

    def stop_container(self, container_id: str, timeout: float = 10.0) -> None:
        box = self._box(container_id)
        box.info = replace(box.info, status="exited")

    def remove_container(self, container_id: str) -> None:
        _pause(self.latency.destroy)
        with self.lock:
            if self.boxes.pop(container_id, None) is None:
                raise NotFound(f"No such container: {container_id}")

    def list_containers(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        with self.lock:
            infos = [b.info for b in self.boxes.values()]
        return [i for i in infos if all(i.labels.get(k) == v for k, v in labels.items())]

    def network_exists(self, name: str) -> bool:
        return True

    # commands

    def exec_run(
        self,
        container_id: str,
        command: str,
        *,
        timeout: float,
        workdir: str | None,
        env: Mapping[str, str] | None,
        max_output: int,
        merge_stderr: bool = True,
        user: str | None = None,
    ) -> CommandOutcome:
        start = time.monotonic()
        if self._box(container_id).info.status != "running":
            raise Conflict(f"container {container_id} is not running")
        _pause(min(self.latency.exec, timeout))
        output = (command[5:] + "\n").encode() if command.startswith("echo ") and "\n" not in command else b""
        return CommandOutcome(
            returncode=0,
            output=output[:max_output],
            stderr=b"",
            timed_out=False,
            truncated=len(output) > max_output,
            output_bytes=len(output),
            duration=time.monotonic() - start,
        )

    # files

    def put_archive(self, container_id: str, directory: str, data: bytes) -> None:
        box = self._box(container_id)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                fh = tar.extractfile(m)
                box.files[os.path.normpath(os.path.join(directory, m.name))] = (
                    fh.read() if fh else b"",
                    m.mode,
                )

    def stat_path(self, container_id: str, path: str) -> PathStat | None:
        box = self._box(container_id)
        if path in box.files:
            data, mode = box.files[path]
            return PathStat(size=len(data), mode=mode & 0o7777, is_dir=False)
        prefix = path.rstrip("/") + "/"
        if any(p.startswith(prefix) for p in box.files):
            return PathStat(size=0, mode=0o755, is_dir=True)
        return None

    def get_archive(self, container_id: str, path: str) -> tuple[PathStat, Iterator[bytes]]:
        box = self._box(container_id)
        if path not in box.files:
            raise NotFound(f"Could not find the file {path} in container {container_id}")
        data, mode = box.files[path]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(os.path.basename(path))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        return PathStat(size=len(data), mode=mode & 0o7777, is_dir=False), iter([buf.getvalue()])

    # images

    def image_info(self, image: str) -> ImageInfo:
        if image in self.committed:
            return self.committed[image]
        if self.images and image not in self.images:
            raise ImageMissing(f"No such image: {image}")
        return _image_info(image)

    def pull_image(self, image: str) -> ImageInfo:
        raise BackendError(f"the memory backend cannot pull {image}")

    def remove_image(self, image: str, force: bool = False) -> None:
        self.committed_files.pop(image, None)
        if self.committed.pop(image, None) is None:
            if image not in self.images:
                raise ImageMissing(f"No such image: {image}")
            self.images.discard(image)

    def image_engine(self) -> BackendImages:
        return BackendImages(self)

    def list_images(self) -> list[ImageInfo]:
        tags = set(self.images) | set(self.committed)
        if not self.images:
            with self.lock:
                tags |= {b.info.image for b in self.boxes.values()}
        return [self.committed.get(t) or _image_info(t) for t in sorted(tags)]

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: Mapping[str, str] | None = None
    ) -> ImageInfo:
        box = self._box(container_id)
        name = f"{repository}:{tag}"
        files = dict(box.files)
        size = sum(len(data) for data, _ in files.values())
        self.committed[name] = replace(_image_info(name), size=size, labels=dict(labels or {}))
        self.committed_files[name] = files
        return self.committed[name]

    # the node

    def health(self) -> bool:
        return True

    def private_paths(self) -> tuple[str, ...]:
        return ()

    def close(self) -> None:
        pass
