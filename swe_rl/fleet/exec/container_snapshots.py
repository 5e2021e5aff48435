"""Whole-container snapshots (`kind="container"`): a lease's container committed to an image on its node.

Why: a tree snapshot carries the repository's changes (and named paths) only; files elsewhere and what
a background process wrote are lost. Committing the container keeps its whole filesystem (not its
processes: a restore starts the image's command afresh). The image is ``swe-rl-snapshot:<id>``,
labelled with the snapshot id, the owner, the expiry and this server's id, and recorded in the node's
`SnapshotStore` like a tree snapshot (same owner, TTL, budget: its bytes are what the commit added, the
image's size less its source image's, and delete), without a tarball. It never leaves its node: a
restore is a new container of that image.

Nothing leaks: deleting or expiring the record and `reap_images` remove the image; `reap_images` takes
every image carrying this server's label whose record is gone, expired or unreadable (a crashed node's
leftovers) and never an image without it. An image a running restored container uses is not forced
out (``force=False``): Docker refuses, the image stays, and the next pass retries once the container
is gone. Only `NodeBackend` calls, so the memory backend serves it too.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from swe_rl.fleet.exec.backend import BackendError, NotFound
from swe_rl.fleet.exec.snapshots import SnapshotStore
from swe_rl.fleet.protocol import ApiError
from swe_rl.fleet.snapshot_protocol import (
    CONTAINER_SNAPSHOT_REPOSITORY,
    ExecSnapshotRequest,
    SnapshotMeta,
    container_image_ref,
)

if TYPE_CHECKING:
    from swe_rl.fleet.exec.operations import Operations

log = logging.getLogger(__name__)


class Ids(Protocol):
    """The work tree's ids at capture (`snapshot_ops.Contents` of a tree capture)."""

    @property
    def tree(self) -> str: ...
    @property
    def base(self) -> str: ...
    @property
    def state_hash(self) -> str: ...


REPOSITORY = CONTAINER_SNAPSHOT_REPOSITORY
"""Repository of every container snapshot's image; the tag is the snapshot id."""
LABEL = "swe-rl.snapshot"
"""Label naming the snapshot id; with `NODE_LABEL`, how the reaper knows an image is ours."""
NODE_LABEL = "swe-rl.snapshot.node"
OWNER_LABEL = "swe-rl.snapshot.owner"
EXPIRES_LABEL = "swe-rl.snapshot.expires"


image_ref = container_image_ref


def snapshot_of(image: str) -> str | None:
    """The snapshot id an image reference names (``swe-rl-snapshot:<id>``), else None."""
    repository, _, tag = image.rpartition(":")
    return tag if repository == REPOSITORY and tag else None


def image_hash(image_id: str) -> str:
    """What a container snapshot's record keeps as its `sha256`: the hash of its image id."""
    return hashlib.sha256(image_id.encode()).hexdigest()


def capture(
    ops: Operations,
    store: SnapshotStore,
    container_id: str,
    req: ExecSnapshotRequest,
    server_id: str,
    ids: Ids,
) -> SnapshotMeta:
    """Commit the container (`ids`: its work tree's, read just before, for the restore's check) and
    record it; the image is removed again when the record is refused (budget, an existing id)."""
    rec = ops.registry.lookup(container_id)
    now = time.time()
    labels = {
        LABEL: req.snapshot_id,
        NODE_LABEL: server_id,
        OWNER_LABEL: req.owner,
        EXPIRES_LABEL: str(int(now + req.ttl)),
    }
    ref = image_ref(req.snapshot_id)
    try:
        if ops.backend.image_info(ref):
            raise ApiError(409, f"snapshot {req.snapshot_id} exists")
    except NotFound:
        pass
    with ops.registry.use(container_id):
        try:
            image = ops.backend.commit_container(rec.id, REPOSITORY, req.snapshot_id, labels)
        except NotFound:
            raise ApiError(410, f"container {rec.id[:12]} no longer exists") from None
    meta = SnapshotMeta(
        snapshot_id=req.snapshot_id,
        kind="container",
        owner=req.owner,
        image=rec.image,
        workdir=rec.workdir,
        sha256=image_hash(image.id),
        state_hash=ids.state_hash,
        tree=ids.tree,
        base_tree=ids.base,
        image_ref=ref,
        bytes=own_bytes(ops.backend, image.size, rec.image),
        created=now,
        expires_at=now + req.ttl,
    )
    try:
        return store.put_record(meta)
    except BaseException:
        remove_image(ops.backend, ref)
        raise


def own_bytes(backend: Any, size: int, source_image: str) -> int:
    """What the commit added to the node's disk: the image's size less its source image's (the layers
    below are shared with it), so the budget counts a snapshot's own layer, not the task image again."""
    try:
        below = backend.image_info(source_image).size
    except BackendError:  # the source image was removed meanwhile: count the whole image
        below = 0
    return max(size - below, 0)


def remove_image(backend: Any, ref: str) -> bool:
    """Remove a snapshot image, never forced; False when it stays (in use: a later pass retries)."""
    try:
        backend.remove_image(ref, force=False)
    except NotFound:
        return True
    except BackendError as exc:
        log.info("snapshot image %s stays for now: %s", ref, exc.message)
        return False
    return True


def reap_images(backend: Any, store: SnapshotStore, server_id: str) -> list[str]:
    """Remove this server's snapshot images whose record is gone or expired; returns their refs."""
    store.reap()
    gone = []
    for image in backend.list_images():
        labels = image.labels or {}
        sid = labels.get(LABEL)
        if sid is None or labels.get(NODE_LABEL) != server_id:
            continue
        try:
            meta = store.meta(sid)
        except ApiError:
            meta = None
        ref = image_ref(sid) if image_ref(sid) in image.tags else image.id
        if meta is not None and meta.kind == "container" and meta.sha256 == image_hash(image.id):
            continue
        if remove_image(backend, ref):
            gone.append(ref)
    if gone:
        log.info("reaped %d snapshot images", len(gone))
    return gone
