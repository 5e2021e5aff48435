"""Warm pools on the real Docker daemon: bounds, no leaks, a warm container is a cold one, pool affinity."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import ROOT

REPO_IMAGE = "swe-rl/fixture.pytoolz_1776_toolz-9001:latest"
OPTS = {"memory": "512m", "cpus": 1.0, "pids_limit": 256}
FAST_WARM = {"SWE_EXEC_WARM_INTERVAL": "0.2", "SWE_EXEC_REAP_INTERVAL": "0.5"}


@pytest.fixture(scope="module")
def repo_image(docker_client) -> str:
    """A task image with a git checkout at /testbed (built offline when missing)."""
    try:
        docker_client.images.get(REPO_IMAGE)
    except Exception:  # noqa: BLE001
        subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)
    return REPO_IMAGE


def wait_for(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.2)


def warm_ids(docker_client, srv) -> set[str]:
    return {
        c.id
        for c in docker_client.containers.list(  # the server may remove one between listing and inspecting
            all=True,
            filters={"label": [f"swe-rl.exec-server={srv.server_id}", "swe-rl.warm=1"]},
            ignore_removed=True,
        )
    }


def ok(resp) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()


def run(srv, cid: str, command: str) -> str:
    res = ok(srv.post("/container/exec", {"container_id": cid, "command": command, "timeout": 60}))
    assert res["returncode"] == 0, res
    return res["output"]


# --------------------------------------------------------------------------- exec server


def test_warm_claim_is_indistinguishable_from_cold(exec_server_factory, docker_client, repo_image, tmp_path):
    srv = exec_server_factory(SWE_EXEC_STATE_DIR=str(tmp_path), **FAST_WARM)
    spec = {"image": repo_image, "env": {"TASK": "x"}, **OPTS}
    cold = ok(srv.post("/container/create", {**spec, "lease_id": "L-cold", "owner": "pool-t"}))
    assert cold["warm"] is False

    answer = ok(srv.post("/warm", {**spec, "count": 1}))
    assert answer["accepted"] == 1
    wait_for(lambda: srv.get("/healthz").json()["warm"].get(repo_image) == 1, what="one warm container")
    started_ahead = warm_ids(docker_client, srv)
    warm = ok(srv.post("/container/create", {**spec, "lease_id": "L-warm", "owner": "pool-t"}))
    assert warm["warm"] is True and warm["container_id"] in started_ahead  # a claim, not a docker run
    srv.post("/warm", {**spec, "count": 0})  # no refill behind it

    a, b = (docker_client.containers.get(x["container_id"]).attrs for x in (cold, warm))
    for key in ("Memory", "MemorySwap", "NanoCpus", "PidsLimit", "NetworkMode", "Init", "SecurityOpt"):
        assert a["HostConfig"][key] == b["HostConfig"][key], key
    for key in ("Image", "WorkingDir", "Env", "Cmd", "User"):
        assert a["Config"][key] == b["Config"][key], key
    for info in (cold, warm):  # what the agent sees inside
        cid = info["container_id"]
        assert run(srv, cid, "pwd") == "/testbed\n"
        assert run(srv, cid, "git status --porcelain") == ""
        assert run(srv, cid, "ls -A /tmp /root") == run(srv, cold["container_id"], "ls -A /tmp /root")
        assert run(srv, cid, "ls -A /tmp") == ""
        assert run(srv, cid, "echo $TASK") == "x\n"
        procs = run(srv, cid, "ps -eo args --no-headers").splitlines()
        procs = [p for p in procs if not p.startswith(("ps ", "/bin/sh -c", "bash -c", "sh -c"))]
        assert procs == ["/sbin/docker-init -- sleep infinity", "sleep infinity"], procs
    # the lease lives in memory and in the state file, since the labels were set before the claim
    status = {c["id"]: c for c in srv.get("/status").json()["containers"]}
    assert (
        status[warm["container_id"]]["lease_id"] == "L-warm"
        and status[warm["container_id"]]["owner"] == "pool-t"
    )
    assert "L-warm" in next(tmp_path.glob("*.json")).read_text()


def test_warm_bounds_count_memory_and_capacity(exec_server_factory, docker_client, base_image):
    srv = exec_server_factory(SWE_EXEC_MAX_WARM="2", SWE_EXEC_MAX_CONTAINERS="3", **FAST_WARM)
    assert ok(srv.post("/warm", {"image": base_image, "count": 5, **OPTS}))["accepted"] == 2
    wait_for(lambda: srv.get("/healthz").json()["warm_total"] == 2, what="two warm containers")
    for _ in range(10):  # the refiller keeps the target, never more
        health = srv.get("/healthz").json()
        assert health["warm_total"] + health["warm_starting"] <= 2 and len(warm_ids(docker_client, srv)) <= 2
        time.sleep(0.2)
    # warm containers count against capacity, but a lease evicts one instead of answering 429
    other = {"image": base_image, "memory": "256m"}  # another request: never served by these warm ones
    first = ok(srv.post("/container/create", other))
    second = ok(srv.post("/container/create", other))
    assert not first["warm"] and not second["warm"]
    health = srv.get("/healthz").json()
    assert (
        health["managed_containers"] <= 3 and health["leased_containers"] == 2 and health["warm_total"] <= 1
    )
    ok(srv.post("/container/create", other))
    resp = srv.post("/container/create", other)
    assert resp.status_code == 429 and resp.headers["Retry-After"]
    assert warm_ids(docker_client, srv) == set() and srv.get("/status").json()["warm_stats"]["evicted"] == 2

    # memory floor: no warm start while MemAvailable is below it
    starved = exec_server_factory(SWE_EXEC_WARM_MIN_FREE_MEMORY="100000g", **FAST_WARM)
    ok(starved.post("/warm", {"image": base_image, "count": 2}))
    time.sleep(2)
    assert starved.get("/healthz").json()["warm_total"] == 0 and warm_ids(docker_client, starved) == set()
    assert starved.get("/status").json()["warm_stats"]["started"] == 0


def test_warm_ttl_expiry_and_bad_input(exec_server_factory, docker_client, base_image):
    srv = exec_server_factory(**FAST_WARM)
    assert srv.post("/warm", {"image": "swe-rl/no-such-image:1", "count": 1}).status_code == 404
    assert srv.post("/warm", {"image": base_image, "count": -1}).status_code == 400
    assert srv.post("/warm", {"image": base_image, "count": 1, "memory": "lots"}).status_code == 400
    ok(srv.post("/warm", {"image": base_image, "count": 1, "ttl": 3}))
    first = wait_for(lambda: warm_ids(docker_client, srv), what="a warm container")
    wait_for(lambda: not (warm_ids(docker_client, srv) & first), timeout=15, what="warm container expired")
    time.sleep(1)  # the target expired with it: nothing new is started
    assert warm_ids(docker_client, srv) == set() and srv.get("/status").json()["warm_targets"] == []


def test_sigterm_destroys_unclaimed_warm_and_keeps_leases(
    exec_server_factory, docker_client, base_image, tmp_path
):
    srv = exec_server_factory(SWE_EXEC_STATE_DIR=str(tmp_path), **FAST_WARM)
    ok(srv.post("/warm", {"image": base_image, "count": 3}))
    wait_for(lambda: srv.get("/healthz").json()["warm_total"] == 3, what="three warm containers")
    claimed = ok(srv.post("/container/create", {"image": base_image, "lease_id": "L-1", "owner": "pool-z"}))
    assert claimed["warm"]
    srv.stop()  # SIGTERM
    assert warm_ids(docker_client, srv) == {claimed["container_id"]}  # only the claimed one stays
    srv.restart()
    status = srv.get("/status").json()
    assert [(c["id"], c["lease_id"], c["owner"]) for c in status["containers"]] == [
        (claimed["container_id"], "L-1", "pool-z")
    ]
    assert run(srv, claimed["container_id"], "echo back") == "back\n"


def test_node_killed_then_restarted_adopts_claimed_destroys_unclaimed(
    exec_server_factory, docker_client, base_image, tmp_path
):
    srv = exec_server_factory(SWE_EXEC_STATE_DIR=str(tmp_path), **FAST_WARM)
    ok(srv.post("/warm", {"image": base_image, "count": 2}))
    wait_for(lambda: srv.get("/healthz").json()["warm_total"] == 2, what="two warm containers")
    claimed = ok(
        srv.post(
            "/container/create", {"image": base_image, "lease_id": "L-adopt", "owner": "pool-x", "ttl": 3600}
        )
    )
    assert claimed["warm"]
    run(srv, claimed["container_id"], "echo kept > /tmp/mark")
    wait_for(lambda: srv.get("/healthz").json()["warm_total"] == 2, what="refilled")
    srv.kill()  # kill -9: no cleanup at all
    assert len(warm_ids(docker_client, srv)) == 3
    srv.restart()
    assert warm_ids(docker_client, srv) == {claimed["container_id"]}
    (rec,) = srv.get("/status").json()["containers"]
    assert (rec["lease_id"], rec["owner"], rec["warm"]) == ("L-adopt", "pool-x", False)
    assert rec["deadline"] > time.time() + 3000  # the lease's deadline, not the warm one on the label
    assert run(srv, claimed["container_id"], "cat /tmp/mark") == "kept\n"
    assert srv.post("/containers/touch", {"container_ids": [claimed["container_id"]]}).json()["touched"] == 1


# --------------------------------------------------------------------------- pool


def test_pool_expected_warms_ahead_and_affinity(fleet, pool_factory, docker_client, base_image, repo_image):
    a, b = fleet(2, **FAST_WARM)
    pool = pool_factory([a, b], SWE_POOL_WARM_MIN="1", SWE_POOL_AFFINITY_SLACK="0.5")
    first = pool.call("/allocate", {"image": base_image, "expected": 3, **OPTS})  # warms the next three

    def warm_total() -> int:
        return sum(s.get("/healthz").json()["warm"].get(base_image, 0) for s in (a, b))

    wait_for(lambda: warm_total() >= 3, what="three warm containers over the fleet")
    assert warm_total() <= 3 + 1  # never beyond the demand (+ one refill in flight)
    started_ahead = warm_ids(docker_client, a) | warm_ids(docker_client, b)
    leases = [pool.call("/allocate", {"image": base_image, **OPTS}) for _ in range(3)]
    assert all(lease["warm"] for lease in leases), leases
    # claims of containers started ahead, not docker runs (one may be promised a start still under way)
    assert sum(lease["container_id"] in started_ahead for lease in leases) >= 2
    for lease in [first, *leases]:
        pool.call("/close", {"lease_id": lease["lease_id"]})

    # affinity: warm containers on b only draw the next allocations there, though a is as free
    spec = {"image": repo_image, "memory": "384m"}
    ok(b.post("/warm", {**spec, "count": 2}))
    wait_for(lambda: b.get("/healthz").json()["warm"].get(repo_image, 0) >= 2, what="warm on b")
    pool.wait_until(
        lambda st: next(n for n in st["nodes"] if n["url"] == b.url)["warm"].get(repo_image, 0) >= 2
    )
    got = [pool.call("/allocate", {**spec, "expected": 0}) for _ in range(2)]
    assert [(g["node"], g["warm"]) for g in got] == [(b.url, True), (b.url, True)]


def test_pool_warm_endpoint_and_node_report(fleet, pool_factory, base_image):
    (srv,) = fleet(1, SWE_EXEC_MAX_WARM="2", **FAST_WARM)
    pool = pool_factory([srv])
    answer = pool.call("/warm", {"image": base_image, "count": 5})
    assert answer["nodes"] == {srv.url: 2}  # bounded by what the node says it holds
    wait_for(lambda: srv.get("/healthz").json()["warm_total"] == 2, what="two warm containers")
    node = pool.wait_until(lambda st: st["nodes"][0]["warm"].get(base_image) == 2)["nodes"][0]
    assert (
        node["capacity"] == 32 and node["cpus"] >= 1 and node["memory_total"] > node["memory_available"] > 0
    )
    assert node["images"] >= 1
    assert pool.post("/warm", {"image": base_image, "count": "many"}).status_code == 400
    assert pool.post("/allocate", {"image": base_image, "expected": -1}).status_code == 400
    assert pool.terminate()  # graceful stop cancels its warm targets
    time.sleep(1)
    assert srv.get("/status").json()["warm_targets"] == []


def test_warm_parallel_defaults_to_four_starts_per_core_within_max_warm(monkeypatch):
    """No Docker: SWE_EXEC_WARM_PARALLEL=0 (the default) derives the parallelism; a set value wins."""
    from types import SimpleNamespace

    from swe_rl.fleet.exec.config import ExecConfig
    from swe_rl.fleet.exec.warm import WarmPool

    def parallel(**fields: Any) -> int:
        return WarmPool.parallel(SimpleNamespace(config=ExecConfig(**fields)))  # type: ignore[arg-type]

    assert ExecConfig().warm_parallel == 0
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert parallel() == 8
    assert parallel(max_warm=3) == 3
    assert parallel(warm_parallel=5) == 5
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert parallel(max_warm=16) == 4
    assert parallel(max_warm=0) == 1
