"""A second node backend in one file, for `test_backend.py`: each "container" is a host directory.

Commands run with `sh` on the host in the container's directory, files live under it. It is no sandbox
(tests only), so it refuses any command naming a path (one with a '/': nothing outside its directory is
touched); it shows that a backend is this file plus one entry of `BACKENDS`.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from swe_rl.fleet.exec.backend import (
    Conflict,
    ContainerInfo,
    ContainerSpec,
    ImageInfo,
    NotFound,
    PathStat,
    Refused,
)
from swe_rl.fleet.exec.executor import TIMEOUT_RETURNCODE, CommandOutcome


class DirectoryBackend:
    name = "directory"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="h-backend-directory-"))
        self.boxes: dict[str, ContainerInfo] = {}

    @classmethod
    def from_config(cls, config: Any, env: Mapping[str, str]) -> DirectoryBackend:
        return cls()

    def _path(self, container_id: str, path: str = "/") -> Path:
        if container_id not in self.boxes:
            raise NotFound(f"no container {container_id}")
        return self.root / container_id / path.lstrip("/")

    def create_container(self, spec: ContainerSpec) -> ContainerInfo:
        cid = secrets.token_hex(16)
        self.boxes[cid] = ContainerInfo(
            cid, spec.name, spec.image, dict(spec.labels), spec.workdir, "created"
        )
        self._path(cid, spec.workdir).mkdir(parents=True)
        return self.boxes[cid]

    def start_container(self, container_id: str) -> None:
        self._path(container_id)
        self.boxes[container_id] = replace(self.boxes[container_id], status="running")

    def stop_container(self, container_id: str, timeout: float = 10.0) -> None:
        self._path(container_id)
        self.boxes[container_id] = replace(self.boxes[container_id], status="exited")

    def remove_container(self, container_id: str) -> None:
        shutil.rmtree(self._path(container_id))
        del self.boxes[container_id]

    def list_containers(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        return [c for c in list(self.boxes.values()) if all(c.labels.get(k) == v for k, v in labels.items())]

    def network_exists(self, name: str) -> bool:
        return False

    def exec_run(self, container_id: str, command: str, *, timeout: float, workdir: str | None,
                 env: Mapping[str, str] | None, max_output: int, merge_stderr: bool = True,
                 user: str | None = None) -> CommandOutcome:  # fmt: skip
        cwd = self._path(container_id, workdir or self.boxes[container_id].workdir)
        if self.boxes[container_id].status != "running":
            raise Conflict("not running")
        if "/" in command:
            raise Refused("the directory backend runs no command naming a path")
        start = time.monotonic()
        err = subprocess.STDOUT if merge_stderr else subprocess.PIPE
        try:
            p = subprocess.run(["sh", "-c", command], cwd=cwd, env={"PATH": os.environ["PATH"], **(env or {})},
                               stdout=subprocess.PIPE, stderr=err, timeout=timeout)  # fmt: skip
            code, out, stderr, timed_out = p.returncode, p.stdout, p.stderr or b"", False
        except subprocess.TimeoutExpired as exc:
            code, out, stderr, timed_out = TIMEOUT_RETURNCODE, exc.output or b"", b"", True
        return CommandOutcome(code, out[:max_output], stderr[:max_output], timed_out, len(out) > max_output,
                              len(out), time.monotonic() - start)  # fmt: skip

    def put_archive(self, container_id: str, directory: str, data: bytes) -> None:
        target = self._path(container_id, directory)
        if not target.is_dir():
            raise NotFound(f"no directory {directory}")
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(target, filter="data")

    def stat_path(self, container_id: str, path: str) -> PathStat | None:
        p = self._path(container_id, path)
        if not p.exists():
            return None
        st = p.stat()
        return PathStat(st.st_size, st.st_mode & 0o7777, p.is_dir())

    def get_archive(self, container_id: str, path: str) -> tuple[PathStat, Iterator[bytes]]:
        stat = self.stat_path(container_id, path)
        if stat is None:
            raise NotFound(f"no such file {path}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(self._path(container_id, path), arcname=os.path.basename(path))
        return stat, iter([buf.getvalue()])

    def image_info(self, image: str) -> ImageInfo:
        return ImageInfo(f"dir:{image}", (image,), 0)

    def pull_image(self, image: str) -> ImageInfo:
        return self.image_info(image)

    def remove_image(self, image: str, force: bool = False) -> None:
        pass

    def image_engine(self):
        from swe_rl.fleet.exec.images import BackendImages

        return BackendImages(self)

    def list_images(self) -> list[ImageInfo]:
        return [self.image_info(i) for i in sorted({c.image for c in self.boxes.values()})]

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: Mapping[str, str] | None = None
    ) -> ImageInfo:
        return self.image_info(f"{repository}:{tag}")

    def health(self) -> bool:
        return True

    def private_paths(self) -> tuple[str, ...]:
        return (str(self.root),)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
