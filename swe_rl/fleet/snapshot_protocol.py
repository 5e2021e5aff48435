"""Wire contract of lease snapshots: what the exec servers, the pool and the client send each other.

A snapshot is an episode's state as a value: the repository's changes against the episode baseline
(`patch_baseline`: a binary git diff, which carries untracked files, deletions and modes) plus, when
asked, a tar of other paths, packed in one tarball kept on the node that took it. Its `state_hash`
(sha256 of the diff and of the extra paths' manifest) is what a restore must reproduce; `sha256` is the
tarball's own hash, checked whenever the bytes travel between nodes.

Kept apart from `protocol.py` on purpose: these are pydantic v2 models (strict, no extra keys), so a
bad body is one `ValidationError`, mapped to a 400 by both servers (`invalid`).
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from swe_rl.fleet.image_names import CONTAINER_SNAPSHOT_REPOSITORY
from swe_rl.fleet.protocol import ApiError

__all__ = [
    "CONTAINER_SNAPSHOT_REPOSITORY",
    "MAX_EXTRA_PATHS",
    "SNAPSHOT_ID",
    "DeleteSnapshotRequest",
    "ExecRestoreRequest",
    "ExecSnapshotRequest",
    "LeaseSnapshotRequest",
    "RestoreResponse",
    "SnapshotInfo",
    "SnapshotMeta",
    "container_image_ref",
    "invalid",
    "parse",
]


def container_image_ref(snapshot_id: str) -> str:
    """The image a container snapshot is committed to, on the node that took it."""
    return f"{CONTAINER_SNAPSHOT_REPOSITORY}:{snapshot_id}"


SNAPSHOT_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
"""Snapshot ids are file names on the nodes: nothing a path could be made of."""
MAX_EXTRA_PATHS = 32

SnapshotId = Annotated[str, StringConstraints(pattern=SNAPSHOT_ID.pattern)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
GitId = Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})?$")]
"""A git object id (SHA-1 or SHA-256 repositories), or '' when there is none."""
Kind = Literal["tree", "container"]
"""``tree``: the repository's changes (+ extra paths), kilobytes, restored on any node with the image;
``container``: the whole container's filesystem committed to an image on its node (slower, bigger,
restored on that node only)."""
VIRTUAL = ("/proc", "/sys", "/dev")
"""Kernel file systems: never a snapshot's (nor all of ``/``)."""


def _carryable(path: str) -> str:
    norm = posixpath.normpath(path)
    if norm == "/" or any(norm == v or norm.startswith(v + "/") for v in VIRTUAL):
        raise ValueError(f"{path} cannot be carried in a snapshot (/, /proc, /sys and /dev are refused)")
    return norm


AbsPath = Annotated[
    str, StringConstraints(pattern=r"^/[^\x00\n]*$", max_length=4096), AfterValidator(_carryable)
]
Ttl = Annotated[float, Field(gt=0, le=7 * 86400)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ExecSnapshotRequest(_Model):
    """``POST /containers/<id>/snapshot`` on an exec server (the pool picks the id)."""

    snapshot_id: SnapshotId
    kind: Kind = "tree"
    owner: str = Field(default="", max_length=256)
    """Who may restore it (the pool checks; the node keeps it for its listing)."""
    ttl: Ttl = 3600.0
    """Seconds the node keeps it."""
    extra_paths: list[AbsPath] = Field(default_factory=list, max_length=MAX_EXTRA_PATHS)
    """Absolute paths outside the repository to carry too (files or folders, as tar keeps them)."""


class ExecRestoreRequest(_Model):
    """``POST /containers/<id>/restore``: a fresh container of the snapshot's image takes its state."""

    snapshot_id: SnapshotId


class SnapshotMeta(_Model):
    """What a node records next to a snapshot's tarball (and answers for a snapshot or an upload)."""

    snapshot_id: SnapshotId
    kind: Kind = "tree"
    owner: str = ""
    image: str = ""
    workdir: str = ""
    sha256: Sha256
    """Hash of the tarball's bytes (a container snapshot: of its image id)."""
    state_hash: Sha256
    """Hash of the state it holds (diff against the baseline + manifest of the extra paths)."""
    tree: GitId = ""
    """Git tree id of the work tree at capture (what a restore must give back); '' without a baseline."""
    base_tree: GitId = ""
    """Git tree id of the baseline it was taken against (a restore's new baseline must be it)."""
    image_ref: str = Field(default="", max_length=512)
    """A container snapshot's committed image on this node ('' for a tree snapshot)."""
    bytes: int = Field(ge=0)
    patch_bytes: int = Field(default=0, ge=0)
    created: float = 0.0
    expires_at: float
    """Epoch seconds after which the node deletes it."""


class LeaseSnapshotRequest(_Model):
    """``POST /leases/<lease_id>/snapshot`` on the pool."""

    owner: str = Field(default="", max_length=256)
    """The lease's owner (as given at allocate); a lease allocated with an owner needs it."""
    kind: Kind = "tree"
    ttl: Ttl | None = None
    extra_paths: list[AbsPath] = Field(default_factory=list, max_length=MAX_EXTRA_PATHS)


class SnapshotInfo(_Model):
    """The pool's answer for a snapshot: its id (for `allocate(from_snapshot=...)`) and hashes."""

    snapshot_id: SnapshotId
    kind: Kind = "tree"
    lease_id: str
    image: str
    node: str
    """The node that holds it (a container snapshot is restored there only)."""
    sha256: Sha256
    state_hash: Sha256
    tree: GitId = ""
    bytes: int
    expires_at: float
    duration: float = 0.0


class RestoreResponse(_Model):
    """An exec server's answer to a restore: the state it verified (the restored work tree's git id)."""

    snapshot_id: SnapshotId
    state_hash: Sha256
    tree: GitId = ""
    verified: bool
    duration: float


class DeleteSnapshotRequest(_Model):
    """``POST /snapshots/delete`` on the pool."""

    snapshot_id: SnapshotId
    owner: str = Field(default="", max_length=256)


def invalid(exc: ValidationError) -> ApiError:
    """A 400 naming the first bad field, as the other endpoints word it."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "body"
    return ApiError(400, f"{where}: {err.get('msg', 'invalid')}")


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], body: object) -> M:
    """`model` from a JSON body; any mistake is a 400."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid(exc) from None
