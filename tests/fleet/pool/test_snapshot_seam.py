"""One seam between the pool and its snapshots: `pool.py` owns a `Snapshots`, and `snapshots.py` knows the
pool only through its public `SnapshotPool` protocol (no import of `pool.py`, not even for type checking,
and no call of a private pool method). The allocate from a snapshot goes through `Pool.allocate_then`."""

from __future__ import annotations

import ast

from swe_rl.fleet.pool.pool import Pool
from swe_rl.fleet.pool.snapshots import SnapshotPool
from tests.conftest import ROOT

SNAPSHOTS = ROOT / "swe_rl" / "fleet" / "pool" / "snapshots.py"


def test_snapshots_import_nothing_of_the_pool_module():
    tree = ast.parse(SNAPSHOTS.read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert "swe_rl.fleet.pool.pool" not in imported


def test_snapshots_call_no_private_pool_member():
    tree = ast.parse(SNAPSHOTS.read_text(encoding="utf-8"))
    private = [
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("_")
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "pool"
    ]
    assert private == []


def test_the_pool_offers_what_the_snapshots_need():
    for name in ("allocate_then", "lease_of"):
        assert callable(getattr(Pool, name)) and not name.startswith("_")
    members = {n for n in vars(SnapshotPool) if not n.startswith("_")} | set(SnapshotPool.__annotations__)
    assert members >= {"allocate_then", "lease_of", "nodes", "calls", "metrics"}


def test_snapshot_ids_are_valid_image_tags():
    """A container snapshot's image is tagged with its id: Docker's tag grammar wants a word character first."""
    import re

    from swe_rl.fleet.pool.snapshots import new_snapshot_id
    from swe_rl.fleet.snapshot_protocol import SNAPSHOT_ID

    tag = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    for _ in range(2000):
        sid = new_snapshot_id()
        assert SNAPSHOT_ID.match(sid) and tag.match(sid), sid
