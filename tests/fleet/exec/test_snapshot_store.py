"""A node's snapshot store leaves no folder behind: none is made until a snapshot is written, and
`close()` (the exec server's stop) removes it once no live snapshot is left in it."""

from __future__ import annotations

import hashlib
import os
import time

from swe_rl.fleet.exec.snapshots import SnapshotConfig, SnapshotStore
from swe_rl.fleet.snapshot_protocol import SnapshotMeta


def meta(sid: str, data: bytes, ttl: float) -> SnapshotMeta:
    return SnapshotMeta(
        snapshot_id=sid,
        sha256=hashlib.sha256(data).hexdigest(),
        state_hash="0" * 64,
        bytes=len(data),
        expires_at=time.time() + ttl,
    )


def test_no_folder_until_a_write_and_none_after_close(tmp_path):
    store = SnapshotStore(SnapshotConfig(dir=str(tmp_path)), "h-fleet-node")
    assert store.listing() == [] and store.reap() == []
    assert os.listdir(tmp_path) == []  # a node that never snapshots makes no folder
    store.close()
    assert os.listdir(tmp_path) == []


def test_close_keeps_live_snapshots_and_removes_the_folder_once_they_went(tmp_path):
    store = SnapshotStore(SnapshotConfig(dir=str(tmp_path)), "h-fleet-node")
    store.put(meta("h-fleet-live", b"live", 3600), b"live")
    store.put(meta("h-fleet-old", b"old", -1), b"old")  # expired: reaped by close
    store.close()
    assert sorted(os.listdir(store.dir)) == [
        "h-fleet-live.json",
        "h-fleet-live.tar",
    ]  # the node may come back
    again = SnapshotStore(SnapshotConfig(dir=str(tmp_path)), "h-fleet-node")
    assert [m.snapshot_id for m in again.listing()] == ["h-fleet-live"]
    assert again.delete("h-fleet-live")
    again.close()
    assert os.listdir(tmp_path) == []


def test_an_exec_server_leaves_no_snapshot_folder(exec_server_factory, tmp_path):
    snaps = tmp_path / "snaps"
    srv = exec_server_factory(SWE_EXEC_SNAPSHOT_DIR=str(snaps))
    assert srv.get("/snapshots").status_code == 200
    srv.stop()
    assert not snaps.exists() or os.listdir(snaps) == []
