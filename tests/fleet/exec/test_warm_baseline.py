"""Warm containers of restores (`baseline` in /warm and create): the node records the episode baseline
when it starts them, a restore into one skips recording it and still comes back exactly the original;
a plain create never gets one (swe_rl/fleet/exec/warm.py, swe_rl/fleet/exec/snapshot_ops.py)."""

from __future__ import annotations

import os

import httpx
import pytest

from tests.fleet.exec.test_warm_pool import FAST_WARM, OPTS, ok, run, wait_for
from tests.fleet.pool.test_snapshots import EXACT_STEPS, INSTANCE, STATE

pytestmark = pytest.mark.docker


def test_a_restore_into_a_warm_container_skips_the_baseline_and_is_exact(
    exec_server_factory, fixture_instances, tmp_path
):
    repo_image = fixture_instances[INSTANCE].image
    snaps = tmp_path / "snapshots"
    srv = exec_server_factory(SWE_EXEC_STATE_DIR=str(tmp_path), SWE_EXEC_SNAPSHOT_DIR=str(snaps), **FAST_WARM)
    spec = {"image": repo_image, "workdir": "/testbed", **OPTS}
    made: list[str] = []

    def create(n: int, **extra) -> dict:
        info = ok(
            srv.post("/container/create", {**spec, **extra, "lease_id": f"h-wb-{n}", "owner": "pool-t"})
        )
        made.append(info["container_id"])
        return info

    def status(cid: str) -> dict:
        return {c["id"]: c for c in srv.get("/status").json()["containers"]}[cid]

    try:
        source = create(0)["container_id"]
        ok(srv.post("/container/diff", {"container_id": source, "record_baseline": True}))
        for step in EXACT_STEPS:
            run(srv, source, step)
        state = run(srv, source, STATE)
        ok(srv.post(f"/containers/{source}/snapshot", {"snapshot_id": "h-wb-snap"}))

        assert ok(srv.post("/warm", {**spec, "count": 2, "baseline": True}))["accepted"] == 2
        wait_for(lambda: srv.get("/healthz").json()["warm"].get(repo_image) == 2, what="two warm containers")
        plain = create(1)
        assert plain["warm"] is False  # the restores' warm pool is not the plain one's
        assert run(srv, plain["container_id"], "ls -A /tmp") == ""

        ahead = create(2, baseline=True)
        cid = ahead["container_id"]
        assert ahead["warm"] is True and status(cid)["baseline_ahead"] is True
        before = run(srv, cid, "cat /tmp/.swe-rl/baseline/tree; stat -c %Y /tmp/.swe-rl/baseline/index")
        restored = ok(srv.post(f"/containers/{cid}/restore", {"snapshot_id": "h-wb-snap"}))
        after = run(srv, cid, "cat /tmp/.swe-rl/baseline/tree; stat -c %Y /tmp/.swe-rl/baseline/index")
        assert after == before  # recorded ahead, not again
        assert restored["verified"] and run(srv, cid, STATE) == state

        # an ahead baseline that is not the snapshot's (here: made stale) is recorded again, still exact
        stale = create(3, baseline=True)
        cid = stale["container_id"]
        assert stale["warm"] is True
        run(srv, cid, "echo 0000000000000000000000000000000000000000 > /tmp/.swe-rl/baseline/tree")
        ok(srv.post(f"/containers/{cid}/restore", {"snapshot_id": "h-wb-snap"}))
        assert run(srv, cid, STATE) == state
        assert run(srv, cid, "cat /tmp/.swe-rl/baseline/tree") == before.splitlines()[0] + "\n"
        ok(srv.post("/warm", {**spec, "count": 0, "baseline": True}))
    finally:
        for c in made:
            srv.post("/container/destroy", {"container_id": c})
        httpx.delete(f"{srv.url}/snapshots/h-wb-snap", headers=srv.headers)
    assert [f for _, _, files in os.walk(snaps) for f in files] == []
