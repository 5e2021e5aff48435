"""Snapshots of leases on real containers: fork at step t into K branches, ownership, expiry, budget,
bad input, no leaks (swe_rl/fleet/pool/snapshots.py, swe_rl/fleet/exec/snapshot_ops.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import tarfile
import time

import httpx
import pytest
from agent_fixtures import client_for, leftover_containers

from swe_rl.fleet.errors import FleetError
from swe_rl.fleet.snapshot_client import LeaseSnapshots

pytestmark = pytest.mark.docker

INSTANCE = "pytoolz__toolz-9001"
TREE_HASH = (  # the whole work tree as git sees it, through a private index (nothing of the repo's changes)
    "export GIT_INDEX_FILE=/tmp/.tree-index && rm -f $GIT_INDEX_FILE && git add -A >/dev/null && git write-tree"
    " && rm -f $GIT_INDEX_FILE && stat -c '%a %n' toolz/*.py | sha256sum"
)
STEPS = [  # an episode's actions: edit, new file, binary file, mode change, deletion, a file outside the repo
    "sed -i 's/def identity(x):/def identity(x):  # edited/' toolz/functoolz.py",
    "printf 'new = 1\\n' > toolz/new_module.py",
    "printf '\\x00\\x01\\x02\\xff' > toolz/blob.bin",
    "chmod +x toolz/utils.py",
    "git rm -q --cached toolz/compatibility.py >/dev/null 2>&1; rm -f toolz/compatibility.py",
    "mkdir -p /root/.cache/agent && printf 'note' > /root/.cache/agent/notes.txt",
]


async def tree_hash(lease) -> str:
    res = await lease.exec(TREE_HASH)
    assert res.ok, res.output
    return res.output


def snap_dir(tmp_path) -> str:
    return str(tmp_path / "snapshots")


def node_files(tmp_path) -> list[str]:
    root = snap_dir(tmp_path)
    return [f for _, _, files in os.walk(root) for f in files] if os.path.isdir(root) else []


async def test_fork_into_branches_on_two_nodes(
    fleet, pool_factory, fixture_instances, docker_client, tmp_path
):
    """K branches of step t hash-equal the original at t, on its node and on another one (moved)."""
    inst = fixture_instances[INSTANCE]
    servers = fleet(2, SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path))
    pool = pool_factory(servers, SWE_POOL_MAX_PER_NODE="2")
    async with client_for(pool) as client:
        original = await client.allocate(inst.image, workdir="/testbed")
        try:
            await original.record_baseline()
            for step in STEPS:
                assert (await original.exec(step)).ok, step
            at_t, patch_at_t = await tree_hash(original), await original.diff()
            info = await original.snapshot(extra_paths=["/root/.cache/agent"])
            assert info.bytes > 0 and info.node == original.node
            assert (await original.exec("echo later >> toolz/new_module.py")).ok  # after t: in no branch
            branches = await asyncio.gather(
                *(client.allocate(inst.image, from_snapshot=info.snapshot_id) for _ in range(3))
            )
            try:
                assert {b.node for b in branches} == {s.url for s in servers}  # 2 per node: one moved
                for branch in branches:
                    assert await tree_hash(branch) == at_t
                    assert (
                        await branch.diff() == patch_at_t
                    )  # the baseline is the image's, not the restored state
                    notes = await branch.read_file("/root/.cache/agent/notes.txt")
                    assert notes == b"note"
                # a branch of a branch: snapshots compose
                second = await branches[0].snapshot(extra_paths=["/root/.cache/agent"])
                assert second.state_hash == info.state_hash
            finally:
                for b in branches:
                    await b.close()
            assert await client.delete_snapshot(info.snapshot_id)
            assert await client.delete_snapshot(second.snapshot_id)
            assert not await client.delete_snapshot(info.snapshot_id)
        finally:
            await original.close()
    assert not leftover_containers(docker_client, pool)
    assert node_files(tmp_path) == []  # deleted on both nodes (the moved copy too)


async def test_owner_expiry_and_bad_input(fleet, pool_factory, fixture_instances, tmp_path):
    inst = fixture_instances[INSTANCE]
    pool = pool_factory(fleet(1, SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path)))
    async with client_for(pool) as client, client_for(pool) as other:
        lease = await client.allocate(inst.image)
        try:
            with pytest.raises(FleetError) as no_baseline:
                await lease.snapshot()
            assert no_baseline.value.status == 422
            await lease.record_baseline()
            info = await lease.snapshot(ttl=600)
            # another owner can neither restore nor snapshot this lease
            with pytest.raises(FleetError) as foreign:
                await other.allocate(inst.image, from_snapshot=info.snapshot_id)
            assert foreign.value.status == 403
            stolen = LeaseSnapshots()
            stolen.client, stolen.lease_id = other, lease.lease_id
            with pytest.raises(FleetError) as foreign_lease:
                await stolen.snapshot()
            assert foreign_lease.value.status == 403
            # bad input: clear 4xx
            bad = [
                ("/allocate", {"image": inst.image, "from_snapshot": "../../etc"}, 400),
                ("/allocate", {"image": inst.image, "from_snapshot": "x" * 22}, 404),
                (
                    "/allocate",
                    {"image": "other:tag", "from_snapshot": info.snapshot_id, "owner": client.owner},
                    409,
                ),
                (
                    f"/leases/{lease.lease_id}/snapshot",
                    {"owner": client.owner, "extra_paths": ["relative"]},
                    400,
                ),
                (
                    f"/leases/{lease.lease_id}/snapshot",
                    {"owner": client.owner, "extra_paths": ["/proc/1"]},
                    400,
                ),
                (
                    f"/leases/{lease.lease_id}/snapshot",
                    {"owner": client.owner, "extra_paths": ["/x/../"]},
                    400,
                ),
                (f"/leases/{lease.lease_id}/snapshot", {"owner": client.owner, "ttl": -1}, 400),
                (f"/leases/{lease.lease_id}/snapshot", {"owner": client.owner, "surprise": 1}, 400),
                ("/leases/nope/snapshot", {}, 403),  # no credential for it: refused before any lookup
                ("/snapshots/delete", {"snapshot_id": info.snapshot_id, "owner": other.owner}, 403),
            ]
            pool.credentials[lease.lease_id] = lease.credential  # the helper's calls are the lease holder's
            for path, body, status in bad:
                resp = pool.post(path, body)
                assert resp.status_code == status, (path, body, resp.text)
                assert "error" in resp.json()
            # expiry: gone from the pool and from the node
            short = await lease.snapshot(ttl=0.5)
            await asyncio.sleep(1.5)
            with pytest.raises(FleetError) as expired:
                await client.allocate(inst.image, from_snapshot=short.snapshot_id)
            assert expired.value.status == 404
        finally:
            await lease.close()


async def test_node_budget_and_transfer_checks(exec_server_factory, fixture_instances, tmp_path):
    """On one exec server: count budget 429, byte budget 507, a tampered upload 422, a bad header 400."""
    inst = fixture_instances[INSTANCE]
    srv = exec_server_factory(SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path), SWE_EXEC_SNAPSHOT_MAX_COUNT="1")
    made = srv.post(
        "/container/create", {"image": inst.image, "lease_id": "h-fork-budget", "owner": "h-fork"}
    )
    assert made.status_code == 200, made.text
    cid = made.json()["container_id"]
    try:
        assert srv.post("/container/diff", {"container_id": cid, "record_baseline": True}).status_code == 200
        first = srv.post(f"/containers/{cid}/snapshot", {"snapshot_id": "h-fork-snap-1"})
        assert first.status_code == 200, first.text
        over = srv.post(f"/containers/{cid}/snapshot", {"snapshot_id": "h-fork-snap-2"})
        assert over.status_code == 429 and over.json()["budget"] == "count"
        got = httpx.get(f"{srv.url}/snapshots/h-fork-snap-1", headers=srv.headers)
        meta = json.loads(got.headers["X-Snapshot-Meta"])
        assert hashlib.sha256(got.content).hexdigest() == meta["sha256"]
        put = httpx.put(
            f"{srv.url}/snapshots/h-fork-snap-3",
            content=got.content + b"x",
            headers={**srv.headers, "X-Snapshot-Meta": json.dumps({**meta, "snapshot_id": "h-fork-snap-3"})},
        )
        assert put.status_code == 422  # bytes that are not what the record says
        no_meta = httpx.put(f"{srv.url}/snapshots/h-fork-snap-3", content=got.content, headers=srv.headers)
        assert no_meta.status_code == 400
        assert srv.post(f"/containers/{cid}/restore", {"snapshot_id": "h-fork-snap-1"}).status_code == 409
        assert httpx.delete(f"{srv.url}/snapshots/h-fork-snap-1", headers=srv.headers).json()["deleted"]
    finally:
        srv.post("/container/destroy", {"container_id": cid})
    small = exec_server_factory(SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path), SWE_EXEC_SNAPSHOT_MAX_BYTES="100")
    made = small.post(
        "/container/create", {"image": inst.image, "lease_id": "h-fork-bytes", "owner": "h-fork"}
    )
    cid = made.json()["container_id"]
    try:
        small.post("/container/diff", {"container_id": cid, "record_baseline": True})
        full = small.post(f"/containers/{cid}/snapshot", {"snapshot_id": "h-fork-snap-4"})
        assert full.status_code == 507 and full.json()["budget"] == "bytes"
    finally:
        small.post("/container/destroy", {"container_id": cid})
    assert node_files(tmp_path) == []


def test_store_reaps_expired(tmp_path):
    from swe_rl.fleet.exec.snapshots import SnapshotConfig, SnapshotStore
    from swe_rl.fleet.snapshot_protocol import SnapshotMeta

    store = SnapshotStore(SnapshotConfig(dir=str(tmp_path)), "h-fork-node")
    data = b"tarball"
    meta = SnapshotMeta(
        snapshot_id="h-fork-old1",
        sha256=hashlib.sha256(data).hexdigest(),
        state_hash="0" * 64,
        bytes=len(data),
        expires_at=time.time() - 1,
    )
    store._write(store._path(meta.snapshot_id, "tar"), data)
    store._write(store._path(meta.snapshot_id, "json"), meta.model_dump_json().encode())
    assert store.reap() == ["h-fork-old1"]
    assert os.listdir(store.dir) == []


def _retar(data: bytes, edit: dict[str, bytes]) -> bytes:
    """The snapshot tarball `data` with some members' bytes replaced."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src.getmembers():
            body = edit.get(m.name, src.extractfile(m).read() if m.isfile() else b"")
            m.size = len(body)
            dst.addfile(m, io.BytesIO(body))
    return out.getvalue()


def test_tampered_snapshots_are_refused(exec_server_factory, fixture_instances, tmp_path):
    """A restore checks the snapshot's bytes against its record and the restored tree against the
    record's git tree id: a changed diff (record kept, or record re-hashed too) or changed extra
    files answer 422, and the untouched snapshot restores."""
    from swe_rl.fleet.exec.snapshot_ops import read_tarball

    inst = fixture_instances[INSTANCE]
    srv = exec_server_factory(SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path))
    made: list[str] = []

    def create(n: int) -> str:
        resp = srv.post(
            "/container/create", {"image": inst.image, "lease_id": f"h-fork-t{n}", "owner": "h-fork"}
        )
        assert resp.status_code == 200, resp.text
        made.append(resp.json()["container_id"])
        return made[-1]

    def put(sid: str, data: bytes, meta: dict) -> None:
        meta = {**meta, "snapshot_id": sid, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        headers = {**srv.headers, "X-Snapshot-Meta": json.dumps(meta)}
        assert httpx.put(f"{srv.url}/snapshots/{sid}", content=data, headers=headers).status_code == 200

    try:
        cid = create(0)
        assert srv.post("/container/diff", {"container_id": cid, "record_baseline": True}).status_code == 200
        step = "printf 'new = 1\\n' > toolz/new_module.py && mkdir -p /opt/h && printf 'a' > /opt/h/x"
        assert srv.post("/container/exec", {"container_id": cid, "command": step}).json()["returncode"] == 0
        whole = srv.post(f"/containers/{cid}/snapshot", {"snapshot_id": "h-fork-whole", "kind": "container"})
        assert whole.status_code == 200, whole.text  # tests/fleet/pool/test_container_snapshots.py
        assert httpx.delete(f"{srv.url}/snapshots/h-fork-whole", headers=srv.headers).json()["deleted"]
        body = {"snapshot_id": "h-fork-orig", "extra_paths": ["/opt/h"]}
        assert srv.post(f"/containers/{cid}/snapshot", body).status_code == 200
        got = httpx.get(f"{srv.url}/snapshots/h-fork-orig", headers=srv.headers)
        meta, data = json.loads(got.headers["X-Snapshot-Meta"]), got.content
        assert re.fullmatch(r"[0-9a-f]{40}", meta["tree"]) and meta["base_tree"] != meta["tree"]
        diff = read_tarball(data).members["patch.diff"]
        assert b"+new = 1" in diff
        evil = _retar(data, {"patch.diff": diff.replace(b"+new = 1", b"+new = 2")})
        put("h-fork-kept", evil, meta)  # the record of the original: its state hash no longer matches
        put("h-fork-rehashed", evil, {**meta, "state_hash": read_tarball(evil).state_hash})
        extra = read_tarball(data).members["extra.tar"]
        put("h-fork-extra", _retar(data, {"extra.tar": _retar(extra, {"opt/h/x": b"b"})}), meta)
        for sid, words in [
            ("h-fork-kept", "not what its record says"),
            ("h-fork-rehashed", "restored state is not the snapshot's: tree"),
            ("h-fork-extra", "restored state is not the snapshot's: extras"),
        ]:
            resp = srv.post(f"/containers/{create(len(made))}/restore", {"snapshot_id": sid})
            assert resp.status_code == 422 and words in resp.json()["error"], (sid, resp.text)
        ok = srv.post(f"/containers/{create(len(made))}/restore", {"snapshot_id": "h-fork-orig"})
        assert ok.status_code == 200 and ok.json()["tree"] == meta["tree"], ok.text
        for sid in ("h-fork-orig", "h-fork-kept", "h-fork-rehashed", "h-fork-extra"):
            httpx.delete(f"{srv.url}/snapshots/{sid}", headers=srv.headers)
    finally:
        for c in made:
            srv.post("/container/destroy", {"container_id": c})
        httpx.delete(
            f"{srv.url}/snapshots/h-fork-whole", headers=srv.headers
        )  # its image, if the test failed
    assert node_files(tmp_path) == []


STATE = (  # what an agent sees of its repository: staging area, status, every path's type, mode, link, bytes
    "git diff --cached --binary HEAD | sha256sum; git ls-files -s | sha256sum; git status --porcelain -uall;"
    " find . -path ./.git -prune -o -printf '%y %m %p %l\\n' | LC_ALL=C sort;"
    " find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum"
)
EXACT_STEPS = [
    "printf 'staged = 1\\n' > toolz/staged_new.py && git add toolz/staged_new.py",  # a staged new file
    "echo '# staged' >> toolz/itertoolz.py && git add toolz/itertoolz.py && echo '# not staged' >> toolz/itertoolz.py",
    "printf 'untracked\\n' > scratch.txt",
    "ln -s toolz/utils.py link_to_utils && ln -s /nonexistent dangling",
    "chmod 755 toolz/dicttoolz.py scratch.txt && chmod 644 toolz/utils.py",  # git keeps the x bit only
    "mkdir -p empty/inner toolz/empty_pkg",  # empty directories
    "rmdir --ignore-fail-on-non-empty doc 2>/dev/null; true",
]


async def test_a_restored_lease_equals_the_original(fleet, pool_factory, fixture_instances, tmp_path):
    """Work tree, staging area, untracked files, modes, symlinks and empty directories come back equal,
    in a cold container and in a warm one of the restores' pool (its baseline recorded ahead)."""
    inst = fixture_instances[INSTANCE]
    (node,) = fleet(1, SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path), SWE_EXEC_WARM_INTERVAL="0.2")
    pool = pool_factory([node])
    async with client_for(pool) as client:
        async with client.lease(inst.image, workdir="/testbed") as original:
            await original.record_baseline()
            for step in EXACT_STEPS:
                assert (await original.exec(step)).ok, step
            state = await original.exec(STATE)
            assert (
                state.ok
                and "A  toolz/staged_new.py" in state.output
                and "MM toolz/itertoolz.py" in state.output
            )
            assert "d 755 ./empty/inner" in state.output and "l 777 ./dangling /nonexistent" in state.output
            info = await original.snapshot()
            async with client.lease(inst.image, from_snapshot=info.snapshot_id) as branch:
                restored = await branch.exec(STATE)
                assert restored.output == state.output
                assert await branch.diff() == await original.diff()
            warm = {"image": inst.image, "workdir": "/testbed", "baseline": True}
            headers = {"Authorization": f"Bearer {pool.token}"}
            async with httpx.AsyncClient(headers=headers, timeout=60) as http:
                assert (await http.post(pool.url + "/warm", json={**warm, "count": 1})).status_code == 200
                deadline = time.monotonic() + 120
                while node.get("/healthz").json()["warm"].get(inst.image) != 1:
                    assert time.monotonic() < deadline, "no warm container for restores"
                    await asyncio.sleep(0.2)
                async with client.lease(inst.image, from_snapshot=info.snapshot_id) as branch:
                    rec = {c["id"]: c for c in node.get("/status").json()["containers"]}[branch.container_id]
                    assert rec["from_warm"] and rec["baseline_ahead"]  # the pool asked for the restores' pool
                    assert (await branch.exec(STATE)).output == state.output
                    assert await branch.diff() == await original.diff()
                await http.post(pool.url + "/warm", json={**warm, "count": 0})
            assert await client.delete_snapshot(info.snapshot_id)


async def test_staging_that_cannot_come_back_is_refused(fleet, pool_factory, fixture_instances, tmp_path):
    """An episode that committed (HEAD moved) and staged more: a tree snapshot cannot give that index
    back (the restored HEAD is the image's), so the restore is a 422, not a silently different lease."""
    inst = fixture_instances[INSTANCE]
    pool = pool_factory(fleet(1, SWE_EXEC_SNAPSHOT_DIR=snap_dir(tmp_path)))
    async with client_for(pool) as client:
        async with client.lease(inst.image, workdir="/testbed") as original:
            await original.record_baseline()
            commit = "git -c user.email=a@b -c user.name=a commit -qam step"
            assert (
                await original.exec(f"echo 1 >> README.rst && {commit} && echo 2 >> README.rst && git add -A")
            ).ok
            info = await original.snapshot()
            with pytest.raises(FleetError, match="staged"):
                await client.allocate(inst.image, from_snapshot=info.snapshot_id)
            assert await client.delete_snapshot(info.snapshot_id)
