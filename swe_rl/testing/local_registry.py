"""A real image registry on loopback for tests and benches: Debian's `docker-registry` (the distribution
registry) with its own config and storage, and small distinct images pushed to it.

dockerd trusts registries on 127.0.0.0/8 without TLS, so `127.0.0.1:PORT/name:tag` pulls work as they
would from any registry. Images made here carry the label `swe-rl.test-image=<run>` and are removed
by `remove_test_images(run)`.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

TEST_IMAGE_LABEL = "swe-rl.test-image"

CONFIG = """version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalRegistry:
    """`docker-registry serve` on a free loopback port; `stop()` ends it and deletes its storage."""

    def __init__(
        self, binary: str = "docker-registry", storage: str | None = None, start_timeout: float = 30.0
    ) -> None:
        """`storage`: a directory kept across runs (pushed layers need not be pushed again); default temporary.
        A registry that exits or does not answer within `start_timeout` is stopped and its dir removed."""
        path = shutil.which(binary) or shutil.which("registry")
        if path is None:
            raise FileNotFoundError("docker-registry not installed (apt-get install docker-registry)")
        self.dir = Path(tempfile.mkdtemp(prefix="swe-rl-registry-"))
        self.port = _free_port()
        config = self.dir / "config.yml"
        self.storage = Path(storage).expanduser() if storage else self.dir / "storage"
        config.write_text(CONFIG.format(root=self.storage, port=self.port), encoding="utf-8")
        self.log = open(self.dir / "registry.log", "wb")
        self.proc = subprocess.Popen([path, "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        self.host = f"127.0.0.1:{self.port}"
        try:
            self._wait(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"docker-registry exited: {(self.dir / 'registry.log').read_text()[-500:]}"
                )
            try:
                if httpx.get(f"http://{self.host}/v2/", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("docker-registry did not answer")

    def ref(self, name: str) -> str:
        return f"{self.host}/{name}"

    def push(self, client: Any, image: str, name: str) -> str:
        """Push a local image as `name` (`repo:tag`); the local registry tag is removed, so it must be pulled."""
        ref = self.ref(name)
        repo, _, tag = ref.rpartition(":")
        client.images.get(image).tag(repo, tag)
        for event in client.api.push(repo, tag, stream=True, decode=True):
            if event.get("error"):
                raise RuntimeError(f"push of {ref} failed: {event['error']}")
        client.images.remove(ref)
        return ref

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def build_layer_image(client: Any, base: str, tag: str, run: str, size: int) -> str:
    """A distinct image FROM `base` with one layer of `size` random bytes (no container runs: COPY only)."""
    context = io.BytesIO()
    dockerfile = f"FROM {base}\nLABEL {TEST_IMAGE_LABEL}={run}\nCOPY blob /blob-{tag.replace(':', '-')}\n"
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("blob", os.urandom(size))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(
        fileobj=context, custom_context=True, tag=tag, rm=True, labels={TEST_IMAGE_LABEL: run}
    )
    return tag


def remove_test_images(client: Any, run: str) -> int:
    """Remove every image labelled with this run (all tags); how many."""
    removed = 0
    for image in client.images.list(filters={"label": f"{TEST_IMAGE_LABEL}={run}"}):
        for tag in image.tags or [image.id]:
            try:
                client.images.remove(tag, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        removed += 1
    return removed
