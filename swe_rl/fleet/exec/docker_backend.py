"""The Docker backend (`SWE_EXEC_BACKEND=docker`, the default): a `NodeBackend` over the Docker SDK.

With `docker_exec.py` (how one command runs), the only module of the exec server that imports
docker-py; everything Docker says is turned into the backend errors of `backend.py` here, so
the rest of the server never sees `docker.errors`. No `docker` CLI processes.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import docker
import docker.errors
import requests
from docker.utils import parse_repository_tag

from swe_rl.fleet.exec import image_disk as disk
from swe_rl.fleet.exec.backend import (
    BackendError,
    Conflict,
    ContainerInfo,
    ContainerSpec,
    ImageInfo,
    ImageMissing,
    NoFreeAddress,
    NotFound,
    PathStat,
    Refused,
    Unavailable,
)
from swe_rl.fleet.exec.daemon_watch import DaemonWatch
from swe_rl.fleet.exec.docker_exec import DockerExecutor, ExecStream
from swe_rl.fleet.exec.executor import CommandOutcome
from swe_rl.fleet.exec.image_disk import LocalImage

if TYPE_CHECKING:
    from swe_rl.fleet.exec.config import ExecConfig

P = ParamSpec("P")
R = TypeVar("R")

PING_TIMEOUT = 3
"""Seconds the health ping waits for the daemon (the node's health is stale after 4 s: `health.py`)."""

# A start the runtime refuses because of what the request asked for (workdir, limits), not a broken node.
_START_REFUSED = re.compile(
    r"OCI runtime create failed|error during container init|not a directory|"
    r"no such file or directory|invalid argument|permission denied",
    re.I,
)
_NOT_RUNNING = re.compile(r"is not running|removal (is )?in progress|marked for removal|is dead\b", re.I)
"""The daemon's words for a container that cannot run commands now. Said with a 409 or, for a container
being removed (`Container <id> is not running: Removal In Progress` on exec start), with a 500: both
are the container's state, not the node failing, so both are `Conflict` (the lease is lost, not the node)."""
# A path Docker cannot follow (a symlink loop, a path through a file): the path's fault.
# The container's network ran out of addresses (a small subnet full of containers): said at start.
_NETWORK_FULL = re.compile(r"no available IPv[46] addresses|no available IP addresses", re.I)
_PATH_REFUSED = re.compile(r"too many (levels of symbolic )?links|not a directory|no such file", re.I)
_GO_DIR, _GO_SYMLINK = 1 << 31, 1 << 27  # Go's os.ModeDir, os.ModeSymlink in Docker's path stat


def _reason(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


def _start_refused(status: int | None, reason: str) -> bool:
    return status == 400 or bool(_START_REFUSED.search(reason))


def _path_refused(status: int | None, reason: str) -> bool:
    return status is None or status < 500 or bool(_PATH_REFUSED.search(reason))


def _bad_request(status: int | None, reason: str) -> bool:
    return status == 400


@contextmanager
def _errors(refused: Callable[[int | None, str], bool] = _bad_request) -> Iterator[None]:
    """Docker's errors as backend errors; `refused(status, reason)` says which are the request's fault."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageMissing(_reason(exc)) from None
    except docker.errors.NotFound as exc:
        raise NotFound(_reason(exc)) from None
    except docker.errors.APIError as exc:
        reason = _reason(exc)
        if exc.status_code == 409 or _NOT_RUNNING.search(reason):
            raise Conflict(reason) from None
        if _NETWORK_FULL.search(reason):
            raise NoFreeAddress(reason) from None
        if refused(exc.status_code, reason):
            raise Refused(reason) from None
        raise BackendError(reason) from None
    except docker.errors.DockerException as exc:
        raise BackendError(str(exc)) from None
    except requests.exceptions.ConnectionError as exc:  # the daemon is down or restarting: 503, not 500
        raise Unavailable(f"the node's Docker daemon cannot be reached: {type(exc).__name__}") from None


def _path_stat(stat: Mapping[str, Any]) -> PathStat:
    mode = int(stat.get("mode", 0))
    return PathStat(
        size=int(stat.get("size", 0)),
        mode=mode & 0o7777,
        is_dir=bool(mode & _GO_DIR),
        is_link=bool(mode & _GO_SYMLINK),
    )


def _image(img: Any) -> ImageInfo:
    labels = (img.attrs.get("Config") or {}).get("Labels") or {}
    return ImageInfo(id=img.id, tags=tuple(img.tags), size=int(img.attrs.get("Size") or 0), labels=labels)


def _listed(client: Any) -> list[dict[str, Any]]:
    """Every local image's summary, from one `GET /images/json`. Why not `images.list()`: docker-py
    inspects each listed image in turn, and one removed in between (another node's reaper, a test
    beside us) raised ImageNotFound out of the whole listing (seen: a node that failed to start)."""
    return list(client.api.images())


def _tags(summary: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(t for t in summary.get("RepoTags") or () if t != "<none>:<none>")


def _summary_image(summary: Mapping[str, Any]) -> ImageInfo:
    return ImageInfo(
        id=str(summary["Id"]),
        tags=_tags(summary),
        size=int(summary.get("Size") or 0),
        labels=dict(summary.get("Labels") or {}),
    )


def _watched(
    method: Callable[Concatenate[DockerBackend, P], R],
) -> Callable[Concatenate[DockerBackend, P], R]:
    """The call runs under the backend's `DaemonWatch`: a hung daemon fails it at once (503)."""

    @functools.wraps(method)
    def run(self: DockerBackend, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.watch.call(lambda: method(self, *args, **kwargs))

    return run


class DockerBackend:
    """Containers of the local (or `DOCKER_HOST`) Docker daemon."""

    name = "docker"

    def __init__(
        self, client: docker.DockerClient, pinger: docker.DockerClient | None = None, *, workers: int = 64
    ) -> None:
        self.client = client
        self._pinger = pinger
        """A client of its own for the health ping, with a short timeout (`PING_TIMEOUT`): the main
        client's 600 s would let a hung daemon hold the node's health check for ten minutes."""
        self.watch = DaemonWatch(workers=workers)
        """Fed by the health pings; every Docker call of a request runs under it (`daemon_watch`)."""
        self._executor = DockerExecutor(client, abandon=lambda: self.watch.hung)

    @classmethod
    def from_config(cls, config: ExecConfig, env: Mapping[str, str]) -> DockerBackend:
        client = docker.from_env(max_pool_size=max(16, config.threads), timeout=600, environment=dict(env))
        pinger = docker.from_env(max_pool_size=1, timeout=PING_TIMEOUT, environment=dict(env))
        # every request thread may wait on one, plus the reaper, the warm refiller and the drain (threads are
        # made on demand: a larger bound costs nothing idle)
        return cls(client, pinger, workers=config.threads + 64)

    # containers

    @_watched
    def create_container(self, spec: ContainerSpec) -> ContainerInfo:
        network_mode = "none" if spec.network is False else None if spec.network is True else spec.network
        with _errors(_start_refused):
            c = self.client.containers.create(
                spec.image,
                command=list(spec.command),
                name=spec.name,
                labels=dict(spec.labels),
                detach=True,
                init=True,
                working_dir=spec.workdir,
                environment=dict(spec.env) or None,
                mem_limit=spec.memory or None,
                memswap_limit=spec.memory or None,
                nano_cpus=int(spec.cpus * 1e9) or None,
                pids_limit=spec.pids_limit or None,
                network_mode=network_mode,
                security_opt=["no-new-privileges"],
            )
        image_id = str((c.attrs or {}).get("Image") or "")  # (the create answer is an inspect: no call)
        return ContainerInfo(c.id, c.name, spec.image, dict(spec.labels), spec.workdir, "created", image_id)

    @_watched
    def start_container(self, container_id: str) -> None:
        with _errors(_start_refused):
            self.client.api.start(container_id)

    @_watched
    def stop_container(self, container_id: str, timeout: float = 10.0) -> None:
        with _errors():
            self.client.api.stop(container_id, timeout=int(timeout))

    @_watched
    def remove_container(self, container_id: str) -> None:
        with _errors():
            self.client.api.remove_container(container_id, force=True)

    @_watched
    def list_containers(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        with _errors():
            found = self.client.api.containers(
                all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]}
            )
        out = []
        for c in found:  # the list answer has no workdir: one inspect each (adoption and reaping only)
            try:
                with _errors():
                    attrs = self.client.api.inspect_container(c["Id"])
            except NotFound:
                continue  # removed since the listing
            config = attrs.get("Config") or {}
            out.append(
                ContainerInfo(
                    id=attrs["Id"],
                    name=str(attrs.get("Name", "")).lstrip("/"),
                    image=str(config.get("Image") or ""),
                    labels=config.get("Labels") or {},
                    workdir=config.get("WorkingDir") or "/",
                    status=str((attrs.get("State") or {}).get("Status", "")),
                    image_id=str(attrs.get("Image") or ""),
                )
            )
        return out

    @_watched
    def network_exists(self, name: str) -> bool:
        try:
            with _errors():
                self.client.networks.get(name)
        except NotFound:
            return False
        return True

    # commands

    @_watched
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
        with _errors():
            return self._executor.run(
                container_id,
                command,
                timeout=timeout,
                workdir=workdir,
                env=env,
                max_output=max_output,
                merge_stderr=merge_stderr,
                user=user,
            )

    @_watched
    def start_command(self, container_id: str, command: str, **kw: Any) -> ExecStream:
        """Start a command (`exec_run`'s arguments); the command lane reads it with no thread waiting
        (`command_flow.StartsCommands`); its outcome is `command_outcome` once it ended."""
        with _errors():
            return self._executor.start(container_id, command, **kw)

    @_watched
    def command_outcome(self, started: ExecStream) -> CommandOutcome:
        with _errors():
            return self._executor.outcome(started)

    # files

    @_watched
    def put_archive(self, container_id: str, directory: str, data: bytes) -> None:
        with _errors():
            if not self.client.api.put_archive(container_id, directory, data):
                raise BackendError(f"could not write into {directory}")

    @_watched
    def stat_path(self, container_id: str, path: str) -> PathStat | None:
        """From the stat header of a HEAD on the archive endpoint (nothing is copied)."""
        api = self.client.api
        with _errors():
            resp = api.head(api._url("/containers/{0}/archive", container_id), params={"path": path})
        header = resp.headers.get("X-Docker-Container-Path-Stat") if resp.status_code == 200 else None
        if not header:
            return None
        try:
            return _path_stat(json.loads(base64.b64decode(header)))
        except (ValueError, TypeError):
            return None

    @_watched
    def get_archive(self, container_id: str, path: str) -> tuple[PathStat, Iterator[bytes]]:
        with _errors(_path_refused):
            stream, stat = self.client.api.get_archive(container_id, path)
        return _path_stat(stat), iter(stream)

    # images

    @_watched
    def image_info(self, image: str) -> ImageInfo:
        with _errors():
            return _image(self.client.images.get(image))

    @_watched
    def pull_image(self, image: str) -> ImageInfo:
        with _errors():
            return _image(self.client.images.pull(image))

    @_watched
    def remove_image(self, image: str, force: bool = False) -> None:
        try:
            with _errors():
                self.client.images.remove(image, force=force)
        except NotFound as exc:
            raise ImageMissing(exc.message) from None

    def image_engine(self) -> DockerImages:
        """The image store's view of this daemon (real layers: shared ones counted once)."""
        return DockerImages(self.client)

    @_watched
    def list_images(self) -> list[ImageInfo]:
        with _errors():
            return [_summary_image(summary) for summary in _listed(self.client)]

    @_watched
    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: Mapping[str, str] | None = None
    ) -> ImageInfo:
        changes = [f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in (labels or {}).items()]
        with _errors():
            self.client.api.commit(container_id, repository=repository, tag=tag, changes=changes or None)
        return self.image_info(f"{repository}:{tag}")

    # the node

    def health(self) -> bool:
        try:
            answered = bool((self._pinger or self.client).ping())
        except Exception:  # noqa: BLE001 - any failure means "not healthy"
            answered = False
        self.watch.saw_ping(answered)
        return answered

    def private_paths(self) -> tuple[str, ...]:
        try:  # Docker's data root, scrubbed from the messages we pass on
            return (str(self.client.info().get("DockerRootDir") or ""),)
        except Exception:  # noqa: BLE001 - an old daemon: the default paths are scrubbed anyway
            return ()

    def close(self) -> None:
        self._executor.lane.close()
        self.watch.close()
        self.client.close()
        if self._pinger is not None:
            self._pinger.close()


class DockerImages:
    """`images.ImageBackend` over docker-py, with each image's real layers (shared layers counted once)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._layers: dict[str, tuple[tuple[str, int], ...]] = {}
        """Layers per image id (an id's content never changes)."""

    def _info(self, image: Any) -> LocalImage:
        image_id = str(getattr(image, "id", None) or image.tags[0])
        return LocalImage(image_id, tuple(image.tags), self._layers_of(image_id))

    def _layers_of(self, image_id: str) -> tuple[tuple[str, int], ...]:
        if image_id not in self._layers:
            history = getattr(self.client.api, "history", None)
            self._layers[image_id] = disk.layers_of(history(image_id)) if history else ()
        return self._layers[image_id]

    def image_info(self, ref: str) -> LocalImage | None:
        try:
            return self._info(self.client.images.get(ref))
        except docker.errors.ImageNotFound:
            return None

    def pull(self, ref: str, progress: Callable[[int, int], None]) -> None:
        with _errors():
            self._pull(ref, progress)

    def _pull(self, ref: str, progress: Callable[[int, int], None]) -> None:
        repo, tag = parse_repository_tag(ref)
        layers: dict[str, tuple[int, int]] = {}
        for event in self.client.api.pull(repo, tag or "latest", stream=True, decode=True):
            if event.get("error"):
                raise BackendError(str(event["error"]))
            detail = event.get("progressDetail") or {}
            if event.get("status") == "Downloading" and detail.get("total"):
                layers[str(event.get("id"))] = (int(detail.get("current", 0)), int(detail["total"]))
                progress(sum(c for c, _ in layers.values()), sum(t for _, t in layers.values()))

    def remove(self, image: LocalImage) -> None:
        with _errors():
            for tag in image.tags or (image.id,):
                self.client.images.remove(tag, noprune=False)

    def list_images(self) -> list[LocalImage]:
        images = []
        for summary in _listed(self.client):
            try:
                images.append(
                    LocalImage(str(summary["Id"]), _tags(summary), self._layers_of(str(summary["Id"])))
                )
            except docker.errors.ImageNotFound:  # removed since the listing: it takes no disk
                continue
        return images

    def images_in_use(self) -> set[str]:
        """Ids (and names, for the fake) of the images of every container on the node, any state."""
        used: set[str] = set()
        for c in self.client.api.containers(all=True):  # one call: summaries, nothing inspected per container
            used.update(str(c.get(k) or "") for k in ("ImageID", "Image"))  # the id, and the name it ran
        used.discard("")
        return used

    def data_root(self) -> str:
        """Docker's data root (the disk a budget share is of); "" when the daemon does not say."""
        try:
            return str(self.client.info().get("DockerRootDir") or "")
        except Exception:  # noqa: BLE001 - an old daemon: the budget share reads "/"
            return ""
