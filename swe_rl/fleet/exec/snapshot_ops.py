"""Snapshot and restore of a container's episode state, through the exec operations only.

Capture is one exec: `patch_baseline`'s diff (the agent's changes against the baseline: edits, new
untracked files, deletions, modes, binary), the git tree ids of the work tree and of the baseline
(``tree``), a manifest and a tar of any extra paths, packed in a tarball the exec writes on its
stdout. Restore is one archive upload (the tarball's members, straight under `SCRATCH`) and one exec
in a fresh container of the same image: record the baseline (the same image gives the same baseline
tree), apply the diff, unpack the extra paths, then print the restored tree ids and the extra paths'
manifest hash, which must be the snapshot's. Git tree ids are content hashes of the whole work tree
(what the diff sees: ignored files apart), so equal ids with an equal baseline mean an equal diff:
the check is exact without a second capture. Only sh, git, tar, find, sort and sha256sum run in the
container, and only the calls every backend offers (exec, put_archive), so it works on any node
backend that runs commands. Whole-container snapshots (`kind="container"`) are committed images
(`container_snapshots`); their "restore" is a check of a container created from that image.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import time
from dataclasses import dataclass
from typing import Any

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.exec import container_snapshots
from swe_rl.fleet.exec.backend import NotFound
from swe_rl.fleet.exec.executor import decode_text
from swe_rl.fleet.exec.operations import SCRATCH, Operations
from swe_rl.fleet.exec.snapshot_scripts import EMPTY_SHA, RESTORE_DIR, capture_script, restore_script
from swe_rl.fleet.exec.snapshots import SnapshotStore
from swe_rl.fleet.protocol import ApiError
from swe_rl.fleet.snapshot_protocol import (
    ExecRestoreRequest,
    ExecSnapshotRequest,
    RestoreResponse,
    SnapshotMeta,
)

INLINE_MAX = 96 << 10
"""Base64 bytes of a snapshot sent inside the restore's command (one exec, no archive call, which a
busy daemon makes slow); a bigger one is uploaded first. Linux caps one argument at 128 KiB."""


@dataclass(frozen=True)
class Contents:
    """What a snapshot tarball holds, read by the node (never trusted beyond its record's hashes)."""

    members: dict[str, bytes]
    state_hash: str
    """sha256 of the diff and the manifest: what the snapshot's record must say."""
    tree: str
    base: str
    paths: list[str]

    @property
    def patch_bytes(self) -> int:
        return len(self.members["patch.diff"])

    def hash_of(self, name: str) -> str:
        """What ``sha256sum`` prints for a member (its hex digest), '' when the snapshot has none."""
        return hashlib.sha256(self.members[name]).hexdigest() if name in self.members else ""

    @property
    def extras_hash(self) -> str:
        """What ``sha256sum`` prints for the manifest (its hex digest)."""
        return hashlib.sha256(self.members.get("manifest", b"")).hexdigest()


def read_tarball(tarball: bytes) -> Contents:
    """The members of a snapshot tarball and the hashes they give; 422 when it is not one."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r") as tar:
            for member in tar.getmembers():
                fh = tar.extractfile(member) if member.isfile() else None
                if fh is not None and "/" not in member.name:
                    members[member.name] = fh.read()
    except tarfile.TarError as exc:
        raise ApiError(422, f"not a snapshot tarball: {exc}") from None
    if "patch.diff" not in members:
        raise ApiError(422, "not a snapshot tarball: no patch.diff")
    digest = hashlib.sha256(b"patch\0" + members["patch.diff"])
    digest.update(b"\0manifest\0" + members.get("manifest", b""))
    for name in ("head", "staged.diff", "dirs"):  # absent from snapshots taken before they were kept
        if name in members:
            digest.update(b"\0" + name.encode() + b"\0" + members[name])
    ids = _ids(decode_text(members.get("tree", b"")))
    paths = [p for p in decode_text(members.get("paths", b"")).splitlines() if p]
    return Contents(members, digest.hexdigest(), ids.get("tree", ""), ids.get("base", ""), paths)


def state_hash(tarball: bytes) -> tuple[str, int]:
    """(sha256 of the state a snapshot tarball holds, bytes of its diff)."""
    got = read_tarball(tarball)
    return got.state_hash, got.patch_bytes


def _ids(text: str) -> dict[str, str]:
    """``name value`` lines (the tree ids, the extras hash) as a mapping."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        out[name] = value.split()[0] if value.split() else ""
    return out


def _upload(contents: Contents) -> bytes:
    """A tar of the members under `RESTORE_DIR`, relative to /tmp (one archive call, no mkdir)."""
    top = SCRATCH.removeprefix("/tmp/")
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in ((top, 0o755), (f"{top}/restore", 0o700)):
            d = tarfile.TarInfo(name)
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, mode, now
            tar.addfile(d)
        for name, data in contents.members.items():
            info = tarfile.TarInfo(f"{top}/restore/{name}")
            info.size, info.mode, info.mtime = len(data), 0o600, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class SnapshotOps:
    """Snapshot and restore on this node's containers, kept in this node's `SnapshotStore`."""

    def __init__(self, ops: Operations, store: SnapshotStore, server_id: str = "") -> None:
        self.ops, self.store, self.server_id = ops, store, server_id

    def delete(self, snapshot_id: str) -> bool:
        """Delete a snapshot's record and files, and its image if it is a container snapshot."""
        try:
            meta: SnapshotMeta | None = self.store.meta(snapshot_id)
        except ApiError as exc:
            if exc.status == 400:
                raise
            meta = None
        found = self.store.delete(snapshot_id)
        if meta is not None and meta.kind == "container":
            container_snapshots.remove_image(self.ops.backend, container_snapshots.image_ref(snapshot_id))
        return found

    def image_released(self, image: str) -> None:
        """A container of `image` was removed: when it is a container snapshot's image whose record is
        gone (deleted while this container still used it), remove the image now, not a reap interval
        later (or never, when this server stops first)."""
        sid = container_snapshots.snapshot_of(image)
        if sid is None:
            return
        try:
            self.store.meta(sid)
            return  # still recorded: the record owns the image
        except ApiError:
            container_snapshots.remove_image(self.ops.backend, image)

    def reap(self) -> list[str]:
        """Expired records and the images of container snapshots without a live record (the reaper)."""
        return container_snapshots.reap_images(self.ops.backend, self.store, self.server_id)

    def capture(self, container_id: str, extra_paths: list[str]) -> bytes:
        """The state of a container as a snapshot tarball (422 without a recorded baseline)."""
        limit = self.store.config.max_snapshot_bytes
        with self.ops.registry.use(container_id) as rec:
            res = self.ops._run(
                rec,
                capture_script(extra_paths),
                timeout=600.0,
                workdir=rec.workdir,
                env=None,
                max_output=limit + 1,
                merge_stderr=False,
            )
        if res.returncode == patch_baseline.NO_BASELINE_EXIT:
            raise ApiError(422, "no baseline recorded in this container: record one before a snapshot")
        if res.returncode != 0 or res.timed_out:
            raise ApiError(422, f"cannot take a snapshot: {decode_text(res.stderr).strip()[:2000]}")
        if res.truncated or len(res.output) > limit:
            raise ApiError(413, f"snapshot of more than {limit} bytes (SWE_EXEC_SNAPSHOT_MAX_SNAPSHOT_BYTES)")
        return res.output

    def snapshot(self, container_id: str, req: ExecSnapshotRequest) -> dict[str, Any]:
        start = time.monotonic()
        if req.kind == "container":
            if req.extra_paths:
                raise ApiError(400, "extra_paths: a container snapshot carries every path already")
            ids = read_tarball(self.capture(container_id, []))
            meta = container_snapshots.capture(self.ops, self.store, container_id, req, self.server_id, ids)
            return {**meta.model_dump(), "duration": round(time.monotonic() - start, 4)}
        rec = self.ops.registry.lookup(container_id)
        data = self.capture(container_id, req.extra_paths)
        got = read_tarball(data)
        now = time.time()
        meta = SnapshotMeta(
            snapshot_id=req.snapshot_id,
            owner=req.owner,
            image=rec.image,
            workdir=rec.workdir,
            sha256=hashlib.sha256(data).hexdigest(),
            state_hash=got.state_hash,
            tree=got.tree,
            base_tree=got.base,
            bytes=len(data),
            patch_bytes=got.patch_bytes,
            created=now,
            expires_at=now + req.ttl,
        )
        self.store.put(meta, data)
        return {**meta.model_dump(), "duration": round(time.monotonic() - start, 4)}

    def restore(self, container_id: str, req: ExecRestoreRequest) -> dict[str, Any]:
        """A fresh container takes the snapshot's state; 409 if it is not fresh or of another image,
        422 if the snapshot's bytes do not give its record's hashes or the restored state is not its."""
        start = time.monotonic()
        meta = self.store.meta(req.snapshot_id)
        if meta.kind == "container":
            return self._check_container(container_id, meta, start)
        meta, data = self.store.get(req.snapshot_id)
        contents = read_tarball(data)
        if contents.state_hash != meta.state_hash or contents.tree != meta.tree or not meta.tree:
            raise ApiError(422, f"snapshot {meta.snapshot_id}: its contents are not what its record says")
        with self.ops.registry.use(container_id) as rec:
            if rec.baseline:
                raise ApiError(409, "restore needs a fresh container (this one has a baseline already)")
            if meta.image and rec.image != meta.image:
                raise ApiError(409, f"snapshot of image {meta.image}, container of {rec.image}")
            upload = _upload(contents)
            inline = base64.b64encode(upload).decode("ascii")
            if len(inline) > INLINE_MAX:
                inline = ""
                try:
                    self.ops.backend.put_archive(rec.id, "/tmp", upload)
                except NotFound:
                    raise ApiError(410, f"container {rec.id[:12]} no longer exists or has no /tmp") from None
            ahead = meta.base_tree if rec.baseline_ahead else ""
            staged = contents.hash_of("staged.diff") or EMPTY_SHA
            res = self._run(rec, restore_script(contents.paths, inline, ahead, staged))
            rec.baseline = True  # the restore records one first thing, whatever happened after
        if res.returncode != 0 or res.timed_out:
            raise ApiError(422, f"cannot restore the snapshot: {decode_text(res.stderr).strip()[:2000]}")
        got = _ids(decode_text(res.output))
        expected = {"tree": meta.tree, "base": meta.base_tree}
        if contents.paths:
            expected["extras"] = contents.extras_hash
        if "dirs" in contents.members:
            expected["dirs"] = contents.hash_of("dirs")
        if "staged" in got or contents.members.get(
            "staged.diff"
        ):  # HEAD is the snapshot's, or staging was lost
            expected["staged"] = contents.hash_of("staged.diff")
        wrong = {k: got.get(k, "") for k, v in expected.items() if got.get(k, "") != v}
        if wrong:
            what = ", ".join(f"{k} {v[:12] or '(none)'} is not {expected[k][:12]}" for k, v in wrong.items())
            raise ApiError(422, f"restored state is not the snapshot's: {what}", restored=wrong)
        return _restored(meta, got["tree"], start)

    def _check_container(self, container_id: str, meta: SnapshotMeta, start: float) -> dict[str, Any]:
        """A container created from a container snapshot's image: 409 if it is of another image, 422 if
        the image is not the one committed (its id's hash) or the work tree's ids are not the record's."""
        ref = container_snapshots.image_ref(meta.snapshot_id)
        with self.ops.registry.use(container_id) as rec:
            if rec.image != ref or meta.image_ref != ref:
                raise ApiError(
                    409, f"snapshot {meta.snapshot_id} restores as a container of {ref}, not {rec.image}"
                )
            try:
                image = self.ops.backend.image_info(ref)
            except NotFound:
                raise ApiError(410, f"the image of snapshot {meta.snapshot_id} is gone") from None
            if container_snapshots.image_hash(image.id) != meta.sha256 or not meta.tree:
                raise ApiError(422, f"snapshot {meta.snapshot_id}: its image is not what its record says")
            script = f"""S={RESTORE_DIR}.check
mkdir -p "$S" || exit 2
( {patch_baseline.diff_script(tree_to="$S/tree.now", diff=False)} ) >/dev/null || {{ echo "cannot read the tree" >&2; exit 6; }}
while read -r line; do echo "$line"; done <"$S/tree.now"
rm -rf "$S"
"""
            res = self._run(rec, script)
            rec.baseline = True  # the image carries the baseline recorded at capture
        if res.returncode != 0 or res.timed_out:
            raise ApiError(
                422, f"cannot check the restored container: {decode_text(res.stderr).strip()[:2000]}"
            )
        got = _ids(decode_text(res.output))
        if got.get("tree") != meta.tree or got.get("base") != meta.base_tree:
            raise ApiError(
                422,
                f"restored state is not the snapshot's: tree {got.get('tree', '')[:12] or '(none)'}",
                restored=got,
            )
        return _restored(meta, got["tree"], start)

    def _run(self, rec: Any, script: str) -> Any:
        """A restore's or check's script in the container (stderr apart: it is the 422's reason)."""
        return self.ops._run(
            rec, script, timeout=600.0, workdir=rec.workdir, env=None, max_output=64 << 10, merge_stderr=False
        )


def _restored(meta: SnapshotMeta, tree: str, start: float) -> dict[str, Any]:
    """The answer to a restore whose state was checked to be the snapshot's."""
    return RestoreResponse(
        snapshot_id=meta.snapshot_id,
        state_hash=meta.state_hash,
        tree=tree,
        verified=True,
        duration=round(time.monotonic() - start, 4),
    ).model_dump()
