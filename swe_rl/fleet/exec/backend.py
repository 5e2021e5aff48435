"""The node backend seam: what the exec server needs of the thing that runs containers.

The exec server (`containers`, `operations`, `warm`, `reaper`, `manager`, `app`) talks only to
`NodeBackend` and raises or catches only the errors below, never a driver's own types. A backend
is one module plus one entry of `BACKENDS` (name → "module:Class"), chosen by `SWE_EXEC_BACKEND`
(`ExecConfig.backend`); the map is loaded lazily, so a node running one backend never imports the
driver of another (the memory backend needs no docker-py).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from swe_rl.fleet.exec.executor import CommandOutcome

if TYPE_CHECKING:
    from swe_rl.fleet.exec.config import ExecConfig
    from swe_rl.fleet.exec.images import ImageBackend

BACKENDS: dict[str, str] = {
    "docker": "swe_rl.fleet.exec.docker_backend:DockerBackend",
    "memory": "swe_rl.fleet.exec.memory_backend:MemoryBackend",
}
"""Backend name → "module:Class" of a `BackendClass`; a new backend is one file and one line here."""


# --------------------------------------------------------------------------- errors


class BackendError(Exception):
    """The backend failed; `status` is the HTTP status the exec server answers when nothing catches it."""

    status = 502

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(BackendError):
    """No such container, or no such path in it."""

    status = 404


class ImageMissing(NotFound):
    """The image is not on this node."""


class Conflict(BackendError):
    """The container exists but cannot do this now (it is not running, a removal is in progress)."""

    status = 409


class Refused(BackendError):
    """The backend refuses what the request asked for (a limit, a workdir through a file, a bad path):
    the caller's fault, not the node's."""

    status = 400


class NoFreeAddress(BackendError):
    """The container's network has no free address left (Docker: "no available IPv4 addresses"):
    the node cannot start it there until a container on that network goes; never retried."""

    status = 507


class Unavailable(BackendError):
    """The backend cannot be reached (daemon down)."""

    status = 503


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ContainerSpec:
    """One container to create: its image, command, labels and limits."""

    image: str
    name: str
    command: tuple[str, ...]
    labels: Mapping[str, str]
    workdir: str
    env: Mapping[str, str] = field(default_factory=dict)
    memory: int = 0
    """Memory limit in bytes, swap included (0: none)."""
    cpus: float = 0.0
    pids_limit: int = 0
    network: bool | str = False
    """False: no network; True: the backend's default network; a name: that network."""


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    image: str
    """The image's first tag ('' when untagged)."""
    labels: Mapping[str, str]
    workdir: str
    status: str
    """`created`, `running`, `exited`, `dead`, ... (Docker's words)."""
    image_id: str = ""
    """The ID of the image the container was made from (``sha256:...``; '' when the backend cannot say):
    unlike the name, it names the content (the grader keys what it keeps of a task's clean tree on it)."""


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    size: int
    """Bytes on disk."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The image's labels (how a node finds its container snapshots' images)."""


@dataclass(frozen=True)
class PathStat:
    size: int
    mode: int
    """Permission bits (0o7777)."""
    is_dir: bool
    is_link: bool = False


# --------------------------------------------------------------------------- the protocol


class NodeBackend(Protocol):
    """Containers, commands, files and images on one node, in the backend's own terms."""

    name: str

    # containers
    def create_container(self, spec: ContainerSpec) -> ContainerInfo:
        """Create (not start) a container; `Refused` when the spec is the problem."""
        ...

    def start_container(self, container_id: str) -> None: ...

    def stop_container(self, container_id: str, timeout: float = 10.0) -> None: ...

    def remove_container(self, container_id: str) -> None:
        """Remove it, killing it first if it runs; `NotFound` when it is already gone."""
        ...

    def list_containers(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        """Every container (running or not) carrying all these labels."""
        ...

    def network_exists(self, name: str) -> bool: ...

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
        """Run a shell command to its end or its deadline (then kill everything it started), output
        capped to head + tail; `NotFound` when the container is gone, `Conflict` when it is not running."""
        ...

    # files
    def put_archive(self, container_id: str, directory: str, data: bytes) -> None:
        """Unpack a tar into a directory; `NotFound` when the container or the directory is missing."""
        ...

    def stat_path(self, container_id: str, path: str) -> PathStat | None:
        """What is at `path` (links not followed), None when nothing is."""
        ...

    def get_archive(self, container_id: str, path: str) -> tuple[PathStat, Iterator[bytes]]:
        """A tar of `path`, streamed, with its stat first (so a caller can refuse a huge file unread);
        `NotFound` when missing, `Refused` when the path itself is the problem (a link loop)."""
        ...

    # images
    def image_info(self, image: str) -> ImageInfo:
        """`ImageMissing` when the node does not have it."""
        ...

    def pull_image(self, image: str) -> ImageInfo: ...

    def remove_image(self, image: str, force: bool = False) -> None: ...

    def list_images(self) -> list[ImageInfo]: ...

    def image_engine(self) -> ImageBackend:
        """What the node's image store (`images.ImageStore`: pulls, disk budget) drives: an
        `images.ImageBackend`; `images.BackendImages(self)` serves any backend."""
        ...

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: Mapping[str, str] | None = None
    ) -> ImageInfo:
        """The container's filesystem as a new image carrying `labels` (container snapshots)."""
        ...

    # the node
    def health(self) -> bool:
        """Whether the backend answers (the exec server's /healthz)."""
        ...

    def private_paths(self) -> tuple[str, ...]:
        """Host paths that must not leak into error messages (Docker's data root)."""
        ...

    def close(self) -> None: ...


class BackendClass(Protocol):
    """What `BACKENDS` names: a class built from the exec server's settings and environment."""

    def from_config(self, config: ExecConfig, env: Mapping[str, str]) -> NodeBackend: ...


def backend_class(name: str) -> BackendClass:
    """The class `BACKENDS` maps `name` to (imported now); ValueError for an unknown name."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown exec backend {name!r}: one of {', '.join(sorted(BACKENDS))}") from None
    module, _, attr = target.partition(":")
    cls: BackendClass = getattr(importlib.import_module(module), attr)
    return cls


def open_backend(config: ExecConfig, env: Mapping[str, str] | None = None) -> NodeBackend:
    """The backend `config.backend` names, built from `config` and `env` (default: the process's)."""
    import os

    return backend_class(config.backend).from_config(config, os.environ if env is None else env)


def image_present(backend: NodeBackend, image: str) -> bool:
    try:
        backend.image_info(image)
    except ImageMissing:
        return False
    return True
