"""A node's snapshot store leaves no folder behind: none is made until a snapshot is written, and
`close()` (the exec server's stop) removes it once no live snapshot is left in it."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from swe_rl.fleet.exec.snapshots import SnapshotConfig, SnapshotStore
from swe_rl.fleet.protocol import ApiError
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


def test_a_write_reads_no_record_from_disk_and_the_budget_holds(tmp_path, monkeypatch):
    """Writes check existence and the budget against the in-memory index (O(1) per write); expired ones
    are reaped from a heap; records of an earlier run are read once, by the periodic pass."""
    store = SnapshotStore(SnapshotConfig(dir=str(tmp_path), max_count=50), "h-fleet-node")
    old = meta("h-fleet-old", b"x", 600)
    store.put(old, b"x")
    store.close()
    reads: list[str] = []
    real = SnapshotStore._read_meta
    monkeypatch.setattr(
        SnapshotStore, "_read_meta", staticmethod(lambda path: reads.append(path) or real(path))
    )
    again = SnapshotStore(SnapshotConfig(dir=str(tmp_path), max_count=50), "h-fleet-node")
    assert len(reads) == 1 and [m.snapshot_id for m in again.listing()] == ["h-fleet-old"]
    reads.clear()
    for i in range(48):
        again.put(meta(f"h-fleet-n{i}", b"x", 600), b"x")
    assert reads == []  # no record read back from disk by any write
    again.put(meta("h-fleet-soon", b"x", -1), b"x")  # already due: reaped by the next write, not counted
    again.put(meta("h-fleet-last", b"x", 600), b"x")
    assert "h-fleet-soon" not in {m.snapshot_id for m in again.listing()}
    with pytest.raises(ApiError) as full:
        again.put(meta("h-fleet-over", b"x", 600), b"x")
    assert full.value.status == 429 and len(again.listing()) == 50
    with pytest.raises(ApiError) as twice:
        again.put(meta("h-fleet-last", b"x", 600), b"x")
    assert twice.value.status == 409
    for m in again.listing():
        again.delete(m.snapshot_id)
    again.close()
