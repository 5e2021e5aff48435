"""Whole-container snapshots (`kind="container"`, docker commit) on real Docker, through the pool and on
one exec server: what a tree snapshot loses survives, owners, budget, delete, tampering and the image
reaper (swe_rl/fleet/exec/container_snapshots.py, swe_rl/fleet/pool/snapshots.py)."""

from __future__ import annotations

import contextlib
import json

import pytest
from agent_fixtures import client_for, leftover_containers
from pool_fixtures import wait_for

from swe_rl.fleet.errors import FleetError

pytestmark = pytest.mark.docker

INSTANCE = "pytoolz__toolz-9001"
LABEL, NODE_LABEL = "swe-rl.snapshot", "swe-rl.snapshot.node"
OUTSIDE = (  # a file outside the repo, and one a background process writes after the command returned
    "mkdir -p /root/.cache/h && printf outside > /root/.cache/h/x"
    " && (sleep 0.2; printf bg > /tmp/bg.txt) >/dev/null 2>&1 & sleep 1; cat /tmp/bg.txt"
)


def images_of(docker_client, server_ids) -> list[str]:
    """Ids of these servers' snapshot images, from one listing (another test's image removed meanwhile, in
    a parallel worker, is never inspected after it is gone)."""
    return [
        i["Id"]
        for i in docker_client.api.images(filters={"label": LABEL})
        if (i.get("Labels") or {}).get(NODE_LABEL) in server_ids
    ]


@contextlib.contextmanager
def no_images_left(docker_client, server_ids):
    """Removes every snapshot image of these servers at the end, whatever happened (forced: the test's)."""
    try:
        yield
    finally:
        for image in images_of(docker_client, server_ids):
            with contextlib.suppress(Exception):
                docker_client.images.remove(image, force=True)


async def test_container_snapshot_keeps_what_a_tree_snapshot_loses(
    fleet, pool_factory, fixture_instances, docker_client, tmp_path
):
    inst = fixture_instances[INSTANCE]
    servers = fleet(2, SWE_EXEC_SNAPSHOT_DIR=str(tmp_path / "s"))
    ids = {s.server_id for s in servers}
    pool = pool_factory(servers)
    with no_images_left(docker_client, ids):
        async with client_for(pool) as client, client_for(pool) as other:
            lease = await client.allocate(inst.image, workdir="/testbed")
            branches = []
            try:
                await lease.record_baseline()
                assert (await lease.exec("printf 'x = 1\\n' > toolz/added.py")).ok
                res = await lease.exec(OUTSIDE)
                assert res.ok and res.output.strip() == "bg", res.output
                tree = await lease.snapshot()
                info = await lease.snapshot(kind="container")
                assert info.kind == "container" and info.node == lease.node and info.bytes > 0
                assert len(images_of(docker_client, ids)) == 1
                with pytest.raises(FleetError) as foreign:
                    await other.allocate(inst.image, from_snapshot=info.snapshot_id)
                assert foreign.value.status == 403
                with pytest.raises(FleetError) as by_name:  # the image by name would skip the owner check
                    await other.allocate(f"swe-rl-snapshot:{info.snapshot_id}")
                assert by_name.value.status == 400
                for _ in range(2):  # on the same node, whatever the load
                    branches.append(await client.allocate(inst.image, from_snapshot=info.snapshot_id))
                    b = branches[-1]
                    assert b.node == info.node
                    assert await b.read_file("/root/.cache/h/x") == b"outside"
                    assert await b.read_file("/tmp/bg.txt") == b"bg"
                    assert await b.read_file("/testbed/toolz/added.py") == b"x = 1\n"
                    assert await b.diff() == await lease.diff()
                from_tree = await client.allocate(inst.image, from_snapshot=tree.snapshot_id)
                branches.append(from_tree)
                assert await from_tree.read_file("/testbed/toolz/added.py") == b"x = 1\n"
                gone = await from_tree.exec("test -e /root/.cache/h/x || test -e /tmp/bg.txt")
                assert not gone.ok  # why the container kind exists
                # delete while a restored container runs: it keeps working, the image goes once it is closed
                assert await client.delete_snapshot(info.snapshot_id)
                assert (await branches[0].exec("cat /root/.cache/h/x")).output == "outside"
                with pytest.raises(FleetError) as deleted:
                    await client.allocate(inst.image, from_snapshot=info.snapshot_id)
                assert deleted.value.status == 404
                await client.delete_snapshot(tree.snapshot_id)
            finally:
                for b in branches:
                    await b.close()
                await lease.close()
        # the deleted snapshot's image goes when its last container is removed, with no reaper pass
        await wait_for(lambda: images_of(docker_client, ids) == [], "the released image removed", 180)
        for srv in servers:  # a reaper pass then finds nothing left
            resp = srv.post("/snapshots/reap", {})
            assert resp.status_code == 200 and resp.json()["images"] == [], resp.text
    assert not leftover_containers(docker_client, pool)


def test_node_budget_owner_tamper_and_reaper(exec_server_factory, fixture_instances, docker_client, tmp_path):
    """One exec server: byte budget 507 leaves no image; a tampered record 422; bad input 4xx; expiry
    and a record lost (a crash) are reaped; an image without our label (or another node's) stays."""
    inst = fixture_instances[INSTANCE]
    srv = exec_server_factory(SWE_EXEC_SNAPSHOT_DIR=str(tmp_path / "s"))
    small = exec_server_factory(SWE_EXEC_SNAPSHOT_DIR=str(tmp_path / "t"), SWE_EXEC_SNAPSHOT_MAX_BYTES="100")
    ids = {srv.server_id, small.server_id}
    made: list[tuple] = []
    foreign = None

    def create(server, n: int) -> str:
        resp = server.post(
            "/container/create", {"image": inst.image, "lease_id": f"h-commit-{n}", "owner": "h-commit"}
        )
        assert resp.status_code == 200, resp.text
        made.append((server, resp.json()["container_id"]))
        cid = made[-1][1]
        assert (
            server.post("/container/diff", {"container_id": cid, "record_baseline": True}).status_code == 200
        )
        return cid

    with no_images_left(docker_client, ids):
        try:
            cid = create(small, 0)
            full = small.post(
                f"/containers/{cid}/snapshot", {"snapshot_id": "h-commit-c0", "kind": "container"}
            )
            assert full.status_code == 507 and full.json()["budget"] == "bytes"
            assert images_of(docker_client, ids) == []  # the refused commit was removed again
            cid = create(srv, 1)
            bad = srv.post(
                f"/containers/{cid}/snapshot",
                {"snapshot_id": "h-commit-c1", "kind": "container", "extra_paths": ["/tmp"]},
            )
            assert bad.status_code == 400
            assert (
                srv.post(f"/containers/{cid}/snapshot", {"snapshot_id": "h", "kind": "container"}).status_code
                == 400
            )
            ok = srv.post(f"/containers/{cid}/snapshot", {"snapshot_id": "h-commit-c1", "kind": "container"})
            assert ok.status_code == 200, ok.text
            meta = ok.json()
            assert meta["image_ref"] == "swe-rl-snapshot:h-commit-c1" and meta["bytes"] > 0
            again = srv.post(
                f"/containers/{cid}/snapshot", {"snapshot_id": "h-commit-c1", "kind": "container"}
            )
            assert again.status_code == 409
            assert srv.get("/snapshots/h-commit-c1").status_code == 409  # never leaves its node
            # a container of another image cannot check as the snapshot
            assert srv.post(f"/containers/{cid}/restore", {"snapshot_id": "h-commit-c1"}).status_code == 409
            # a tampered record: its image hash no longer matches
            record = tmp_path / "s" / srv.server_id / "h-commit-c1.json"
            good = record.read_text()
            record.write_text(json.dumps({**json.loads(good), "sha256": "0" * 64}))
            restored = srv.post(
                "/container/create",
                {
                    "image": meta["image_ref"],
                    "lease_id": "h-commit-r",
                    "owner": "h-commit",
                    "workdir": "/testbed",
                },
            )
            assert restored.status_code == 200, restored.text
            rid = restored.json()["container_id"]
            made.append((srv, rid))
            assert srv.post(f"/containers/{rid}/restore", {"snapshot_id": "h-commit-c1"}).status_code == 422
            record.write_text(good)
            check = srv.post(f"/containers/{rid}/restore", {"snapshot_id": "h-commit-c1"})
            assert check.status_code == 200 and check.json()["tree"] == meta["tree"], check.text
            # the record lost (a crash): the reaper removes the image once no container uses it
            record.unlink()
            assert srv.post("/snapshots/reap", {}).json()["images"] == []  # in use: kept, retried later
            srv.post(
                "/container/destroy", {"container_id": rid}
            )  # its last container: the image goes with it
            assert images_of(docker_client, ids) == []
            # a foreign image (no node label of ours) carrying the snapshot label stays
            foreign = docker_client.api.commit(
                cid, repository="h-commit-foreign", tag="x", changes=[f"LABEL {LABEL}=h-commit-f"]
            )
            assert srv.post("/snapshots/reap", {}).json()["images"] == []
            assert docker_client.images.get("h-commit-foreign:x")
            # expiry: a short TTL is reaped with its image
            short = srv.post(
                f"/containers/{cid}/snapshot",
                {"snapshot_id": "h-commit-c2", "kind": "container", "ttl": 0.01},
            )
            assert short.status_code == 200, short.text
            assert srv.post("/snapshots/reap", {}).json()["images"] == ["swe-rl-snapshot:h-commit-c2"]
            assert images_of(docker_client, ids) == []
        finally:
            for server, c in made:
                server.post("/container/destroy", {"container_id": c})
            if foreign is not None:
                with contextlib.suppress(Exception):
                    docker_client.images.remove("h-commit-foreign:x", force=True)
