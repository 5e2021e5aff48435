"""Snapshot and restore of a container's episode state, through the exec operations only.

Capture runs `patch_baseline`'s diff in the container (the agent's changes against the baseline:
edits, new untracked files, deletions, modes, binary) and packs it, with a manifest and a tar of any
extra paths, into one tarball the node reads back with `read_file`. Restore writes that tarball into a
fresh container of the same image, records the baseline there (the same image gives the same baseline
tree), applies the diff, unpacks the extra paths, then captures again and insists the state hash is the
snapshot's. Only sh, git, tar, find, sort and sha256sum run in the container, and only the operations
every backend offers (exec, read_file, write_file) are used, so it works on any node backend. A
whole-container snapshot (`docker commit`: processes' files outside the tree) is not done here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import time
from typing import Any

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.exec.executor import decode_text
from swe_rl.fleet.exec.operations import SCRATCH, Operations, _sh_quote
from swe_rl.fleet.exec.snapshots import SnapshotStore
from swe_rl.fleet.protocol import ApiError, ReadFileRequest, WriteFileRequest
from swe_rl.fleet.snapshot_protocol import (
    ExecRestoreRequest,
    ExecSnapshotRequest,
    RestoreResponse,
    SnapshotMeta,
)

CAPTURE_TAR = f"{SCRATCH}/snapshot.tar"
RESTORE_TAR = f"{SCRATCH}/restore.tar"
_APPLY = (
    "git -c core.hooksPath=/dev/null -c core.autocrlf=false -c core.fileMode=true -c core.symlinks=true "
    "-c apply.whitespace=nowarn apply --binary"
)


def capture_script(extra_paths: list[str]) -> str:
    """sh: the diff against the baseline + the extra paths' manifest and tar, packed in `CAPTURE_TAR`."""
    quoted = " ".join(_sh_quote(p) for p in extra_paths) or "''"
    relative = " ".join(_sh_quote(p.lstrip("/") or ".") for p in extra_paths)
    extras = ""
    if extra_paths:
        extras = f"""
present=
for p in {quoted}; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    find "$p" -printf '%y %m %p %l\\n' | LC_ALL=C sort >>"$S/manifest" || exit 2
    find "$p" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum >>"$S/manifest" || exit 2
    present=1
  else
    printf 'absent %s\\n' "$p" >>"$S/manifest"
  fi
done
if [ -n "$present" ]; then
  tar -C / --ignore-failed-read -cf "$S/extra.tar" -- {relative} 2>/dev/null
  [ -f "$S/extra.tar" ] || exit 2
  members="$members extra.tar"
fi
"""
    return f"""
S={SCRATCH}/snapshot
rm -rf "$S" "{CAPTURE_TAR}" && mkdir -p "$S" || exit 2
( {patch_baseline.DIFF_SCRIPT} ) >"$S/patch.diff" 2>"$S/diff.err" || {{ rc=$?; cat "$S/diff.err" >&2; exit $rc; }}
: >"$S/manifest"
printf '%s\\n' {quoted} >"$S/paths"
members="patch.diff manifest paths"
{extras}
tar -C "$S" -cf "{CAPTURE_TAR}" $members || exit 2
"""


RESTORE_SCRIPT = f"""
S={SCRATCH}/restore
rm -rf "$S" && mkdir -p "$S" && tar -C "$S" -xf "{RESTORE_TAR}" || {{ echo "cannot unpack the snapshot" >&2; exit 2; }}
( {patch_baseline.BASELINE_SCRIPT} ) >/dev/null || {{ echo "cannot record the baseline" >&2; exit 3; }}
{patch_baseline.SAFE_GIT_ENV}
top=$(git rev-parse --show-toplevel) && cd "$top" || exit 2
if [ -s "$S/patch.diff" ]; then {_APPLY} "$S/patch.diff" || {{ echo "the diff does not apply" >&2; exit 4; }}; fi
if [ -f "$S/extra.tar" ]; then tar -C / -xpf "$S/extra.tar" || {{ echo "cannot unpack the extra paths" >&2; exit 5; }}; fi
rm -rf "$S" "{RESTORE_TAR}"
"""


def state_hash(tarball: bytes) -> tuple[str, int]:
    """(sha256 of the state a snapshot tarball holds, bytes of its diff): what a restore must reproduce."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r") as tar:
            for member in tar.getmembers():
                fh = tar.extractfile(member) if member.isfile() else None
                if fh is not None and member.name in ("patch.diff", "manifest"):
                    members[member.name] = fh.read()
    except tarfile.TarError as exc:
        raise ApiError(422, f"not a snapshot tarball: {exc}") from None
    if "patch.diff" not in members:
        raise ApiError(422, "not a snapshot tarball: no patch.diff")
    digest = hashlib.sha256(b"patch\0" + members["patch.diff"])
    digest.update(b"\0manifest\0" + members.get("manifest", b""))
    return digest.hexdigest(), len(members["patch.diff"])


class SnapshotOps:
    """Snapshot and restore on this node's containers, kept in this node's `SnapshotStore`."""

    def __init__(self, ops: Operations, store: SnapshotStore) -> None:
        self.ops, self.store = ops, store

    def capture(self, container_id: str, extra_paths: list[str], before: str = "") -> bytes:
        """The state of a container as a snapshot tarball (422 without a recorded baseline); `before`:
        sh lines run first in the same exec (a restore, so that restore and check cost one exec)."""
        with self.ops.registry.use(container_id) as rec:
            res = self.ops._run(
                rec,
                before + capture_script(extra_paths),
                timeout=600.0,
                workdir=rec.workdir,
                env=None,
                max_output=64 << 10,
                merge_stderr=False,
            )
            if before:
                rec.baseline = True  # the restore records one first thing, whatever happened after
            if res.returncode == patch_baseline.NO_BASELINE_EXIT:
                raise ApiError(422, "no baseline recorded in this container: record one before a snapshot")
            if res.returncode != 0 or res.timed_out:
                what = "restore the snapshot" if before else "take a snapshot"
                raise ApiError(422, f"cannot {what}: {decode_text(res.stderr).strip()[:2000]}")
            limit = self.store.config.max_snapshot_bytes
            got = self.ops.read_file(ReadFileRequest(container_id=rec.id, path=CAPTURE_TAR, max_bytes=limit))
        if got.get("encoding") == "base64":
            return base64.b64decode(got["content"])
        return str(got["content"]).encode("utf-8")

    def snapshot(self, container_id: str, req: ExecSnapshotRequest) -> dict[str, Any]:
        start = time.monotonic()
        rec = self.ops.registry.lookup(container_id)
        data = self.capture(container_id, req.extra_paths)
        digest, patch_bytes = state_hash(data)
        now = time.time()
        meta = SnapshotMeta(
            snapshot_id=req.snapshot_id,
            owner=req.owner,
            image=rec.image,
            workdir=rec.workdir,
            sha256=hashlib.sha256(data).hexdigest(),
            state_hash=digest,
            bytes=len(data),
            patch_bytes=patch_bytes,
            created=now,
            expires_at=now + req.ttl,
        )
        self.store.put(meta, data)
        return {**meta.model_dump(), "duration": round(time.monotonic() - start, 4)}

    def restore(self, container_id: str, req: ExecRestoreRequest) -> dict[str, Any]:
        """A fresh container takes the snapshot's state; 409 if it is not fresh or of another image."""
        start = time.monotonic()
        meta, data = self.store.get(req.snapshot_id)
        with self.ops.registry.use(container_id) as rec:
            if rec.baseline:
                raise ApiError(409, "restore needs a fresh container (this one has a baseline already)")
            if meta.image and rec.image != meta.image:
                raise ApiError(409, f"snapshot of image {meta.image}, container of {rec.image}")
            self.ops.write_file(
                WriteFileRequest(container_id=rec.id, path=RESTORE_TAR, content=data, mode=0o600)
            )
        got, _ = state_hash(self.capture(container_id, _extra_paths_of(data), before=RESTORE_SCRIPT))
        if got != meta.state_hash:
            raise ApiError(
                409, f"restored state {got[:12]} is not the snapshot's {meta.state_hash[:12]}", state_hash=got
            )
        return RestoreResponse(
            snapshot_id=meta.snapshot_id,
            state_hash=got,
            verified=True,
            duration=round(time.monotonic() - start, 4),
        ).model_dump()


def _extra_paths_of(tarball: bytes) -> list[str]:
    """The extra paths a snapshot carried (its `paths` member), to capture them again after a restore."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r") as tar:
        try:
            fh = tar.extractfile("paths")
        except KeyError:
            return []
        text = fh.read().decode("utf-8") if fh else ""
    return [line for line in text.splitlines() if line]
