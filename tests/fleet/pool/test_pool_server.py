"""Pool server over real exec servers on the real Docker daemon; the pool runs as a subprocess."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
import time
from typing import Any

import docker.errors
import httpx
import pytest
from pool_fixtures import PoolProc

from swe_rl.fleet.call_headers import CREDENTIAL_HEADER
from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.errors import FleetUnavailable

INIT_REPO = "git init -q && printf 'a\\n' > f.txt && git add f.txt && git commit -qm init"


def containers_of(docker_client: Any, pool: PoolProc) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"swe-rl.owner={pool.pool_id}"})


def gone(docker_client: Any, container_id: str) -> bool:
    try:
        docker_client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def wait_gone(docker_client: Any, container_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not gone(docker_client, container_id):
        assert time.monotonic() < deadline, f"container {container_id[:12]} still there after {timeout}s"
        time.sleep(0.1)


def metric(pool: PoolProc, line_start: str) -> float:
    for line in pool.get("/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return 0.0


def test_lease_lifecycle(fleet, pool_factory, docker_client, base_image):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    lease = pool.call("/allocate", {"image": base_image, "instance_id": "demo-1"})
    lid = lease["lease_id"]
    assert lease["node"] == srv.url and lease["workdir"] == "/testbed" and lease["expires_at"] > time.time()
    labels = docker_client.containers.get(lease["container_id"]).labels
    assert labels["swe-rl.owner"] == pool.pool_id and labels["swe-rl.lease-id"] == lid

    out = pool.call("/exec", {"lease_id": lid, "command": INIT_REPO + " && echo ready", "timeout": 60})
    assert out["returncode"] == 0 and out["output"].strip() == "ready" and not out["timed_out"]
    assert pool.call("/write_file", {"lease_id": lid, "path": "f.txt", "content": "b\n"})["bytes"] == 2
    assert pool.call("/read_file", {"lease_id": lid, "path": "/testbed/f.txt"})["content"] == "b\n"
    pool.call("/write_file", {"lease_id": lid, "path": "/tmp/bin", "content_b64": "AP8="})
    binary = pool.call("/read_file", {"lease_id": lid, "path": "/tmp/bin"})
    assert (binary["content"], binary["encoding"]) == ("AP8=", "base64")
    missing = pool.post("/read_file", {"lease_id": lid, "path": "nope.txt"})
    assert missing.status_code == 404 and "no such file" in missing.json()["error"]

    patch = pool.call("/diff", {"lease_id": lid})["patch"]
    assert "-a\n+b\n" in patch
    pool.call("/exec", {"lease_id": lid, "command": "git reset -q --hard"})
    result = pool.call(
        "/evaluate",
        {"lease_id": lid, "patch": patch, "eval_script": "grep -qx b f.txt && echo PASSED", "timeout": 60},
    )
    assert (
        result["apply_status"] == "applied" and result["returncode"] == 0 and "PASSED" in result["test_log"]
    )

    hb = pool.call("/heartbeat", {"lease_id": lid})
    assert hb["ok"] and hb["expires_at"] > time.time() + 200
    st = pool.status()
    assert st["totals"]["leases"] == 1 and st["leases"][0]["instance_id"] == "demo-1"
    node = st["nodes"][0]
    assert (node["url"], node["healthy"], node["load"], node["cap"]) == (srv.url, True, 1, 15)
    assert metric(pool, "swe_pool_leases_active") == 1
    assert metric(pool, 'swe_pool_calls_total{op="exec",outcome="ok"}') == 2
    assert metric(pool, 'swe_pool_call_seconds_count{op="evaluate"}') == 1
    assert metric(pool, f'swe_pool_node_up{{node="{srv.url}"}}') == 1

    assert pool.call("/close", {"lease_id": lid}) == {"ok": True, "released": True}
    wait_gone(docker_client, lease["container_id"])  # destroyed right after, off the request path
    assert pool.call("/close", {"lease_id": lid}) == {"ok": True, "already_closed": True}
    after = pool.post("/exec", {"lease_id": lid, "command": "true"})
    assert after.status_code == 404 and after.json()["lease_lost"] is True


def test_auth_and_bad_input(fleet, pool_factory, docker_client, base_image):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    health = httpx.get(pool.url + "/healthz").json()
    assert health == {
        "ok": True,
        "nodes_healthy": 1,
        "nodes_total": 1,
        "leases": 0,
        "version": health["version"],
    }
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": pool.token}):
        for path in ("/allocate", "/exec", "/heartbeat", "/close"):
            resp = pool.post(path, {"image": base_image}, headers=headers)
            assert resp.status_code == 401 and "unauthorized" in resp.json()["error"]
        assert pool.get("/status", headers=headers).status_code == 401
        assert pool.get("/metrics", headers=headers).status_code == 401

    def err(resp: httpx.Response, status: int, text: str) -> dict[str, Any]:
        assert resp.status_code == status, resp.text
        body = resp.json()
        assert text in body["error"], body
        return body

    err(pool.post("/allocate", content=b"{not json"), 400, "JSON object")
    err(pool.post("/allocate", content=b"[1, 2]"), 400, "JSON object")
    err(pool.post("/allocate", {}), 400, "image")
    err(pool.post("/allocate", {"image": base_image, "request_id": 7}), 400, "request_id")
    err(pool.post("/allocate", {"image": base_image, "memory": "lots"}), 400, "memory")  # exec server's check
    assert containers_of(docker_client, pool) == []  # nothing half-created
    err(pool.post("/exec", {"command": "true"}), 400, "lease_id")
    # a call on a lease needs that lease's credential: without one, 403 before the lease is even looked up
    err(pool.post("/exec", {"lease_id": "nope", "command": "true"}), 403, "needs the lease's credential")
    err(pool.post("/close", {"lease_id": "nope"}), 403, "needs the lease's credential")
    operator = pool.operator_headers  # needs none: it is told the lease is unknown
    assert err(
        pool.post("/exec", {"lease_id": "nope", "command": "true"}, headers=operator),
        404,
        "unknown or expired lease",
    )["lease_lost"]
    err(pool.post("/heartbeat", {"lease_id": "nope"}), 404, "unknown or expired lease")
    assert pool.call("/close", {"lease_id": "nope"}, headers=operator) == {"ok": True, "already_closed": True}
    lid = pool.call("/allocate", {"image": base_image})["lease_id"]
    err(pool.post("/exec", {"lease_id": lid}), 400, "command")  # passed through from the exec server
    err(pool.post("/exec", {"lease_id": lid, "command": "true", "timeout": "soon"}), 400, "timeout")
    err(pool.get("/nowhere"), 404, "Not Found")
    err(pool.get("/allocate"), 405, "Method Not Allowed")
    assert pool.call("/exec", {"lease_id": lid, "command": "echo ok"})["output"] == "ok\n"
    assert metric(pool, 'swe_pool_allocations_total{outcome="bad_request"}') >= 2


async def test_request_id_makes_allocate_idempotent(fleet, pool_factory, docker_client, base_image):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    body = {"image": base_image, "request_id": "req-1"}
    async with httpx.AsyncClient(base_url=pool.url, headers=pool.headers, timeout=120) as http:
        first = await asyncio.gather(
            *(http.post("/allocate", json=body) for _ in range(3))
        )  # in flight together
        again = await http.post("/allocate", json=body)
    ids = {r.json()["lease_id"] for r in [*first, again]}
    assert len(ids) == 1 and all(r.status_code == 200 for r in [*first, again])
    assert len(containers_of(docker_client, pool)) == 1 and pool.status()["totals"]["leases"] == 1


async def test_least_loaded_placement_and_cap(fleet, pool_factory, base_image):
    a, b = fleet(2)
    pool = pool_factory([a, b], SWE_POOL_MAX_PER_NODE="2", SWE_POOL_RETRY_AFTER="3")
    async with httpx.AsyncClient(base_url=pool.url, headers=pool.headers, timeout=120) as http:
        # six at once against a capacity of four: allocations in flight count against the cap
        resps = await asyncio.gather(*(http.post("/allocate", json={"image": base_image}) for _ in range(6)))
    ok = [r.json() for r in resps if r.status_code == 200]
    full = [r for r in resps if r.status_code == 429]
    assert len(ok) == 4 and len(full) == 2
    assert sorted(lease["node"] for lease in ok) == sorted([a.url, a.url, b.url, b.url])
    assert full[0].headers["Retry-After"] == "3" and "full" in full[0].json()["error"]
    assert all(n["load"] == 2 for n in pool.status()["nodes"])
    assert metric(pool, 'swe_pool_allocations_total{outcome="full"}') == 2

    on_b = next(lease for lease in ok if lease["node"] == b.url)
    pool.call(
        "/close",
        {"lease_id": on_b["lease_id"]},
        headers={**pool.headers, CREDENTIAL_HEADER: on_b["credential"]},
    )
    assert pool.call("/allocate", {"image": base_image})["node"] == b.url  # the only node with room


def test_missing_image_and_full_node_try_other_nodes(fleet, pool_factory, base_image):
    (small,) = fleet(1, SWE_EXEC_MAX_CONTAINERS="1")  # answers 429 itself past one container
    (big,) = fleet(1)
    pool = pool_factory([small, big])
    resp = pool.post("/allocate", {"image": "swe-rl/no-such-image:1"})
    assert resp.status_code == 404
    body = resp.json()
    assert "image not found" in body["error"] and sorted(body["nodes"]) == sorted([small.url, big.url])
    assert metric(pool, 'swe_pool_allocations_total{outcome="image_not_found"}') == 1

    nodes = [pool.call("/allocate", {"image": base_image})["node"] for _ in range(4)]
    assert nodes.count(small.url) == 1 and nodes.count(big.url) == 3


@pytest.mark.slow  # starts the server as a subprocess: seconds
def test_refuses_to_start_without_token_or_nodes(tmp_path):
    script = ["-m", "swe_rl.fleet.pool.app"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWE_EXEC", "SWE_POOL"))}
    env["SWE_POOL_DB"] = str(tmp_path / "x.db")
    no_token = subprocess.run(
        [sys.executable, *script, "--exec-urls", "http://127.0.0.1:9"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (
        no_token.returncode != 0
        and "SWE_EXEC_TOKEN" in no_token.stderr
        and "Traceback" not in no_token.stderr
    )
    no_nodes = subprocess.run(
        [sys.executable, *script],
        env={**env, "SWE_EXEC_TOKEN": "t"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert no_nodes.returncode != 0 and "SWE_POOL_EXEC_URLS" in no_nodes.stderr


def test_ttl_reaping_and_lost_containers(fleet, pool_factory, docker_client, base_image):
    """No heartbeat for a TTL reclaims a lease; a heartbeat or an in-flight call keeps one. Ordered by
    events, not by a clock: the kept lease is heartbeated from its allocation on, and the test waits for
    the idle lease to go (under load one allocate took longer than a short TTL)."""
    (srv,) = fleet(1, SWE_EXEC_REAP_INTERVAL="1")  # the exec server soon notices a container removed under it
    ttl = 8.0
    pool = pool_factory([srv], SWE_POOL_LEASE_TTL=str(ttl))
    stop = threading.Event()
    kept = pool.call("/allocate", {"image": base_image})

    def beat() -> None:
        while not stop.wait(0.5):
            pool.call("/heartbeat", {"lease_id": kept["lease_id"]})

    beater = threading.Thread(target=beat)
    beater.start()
    try:
        busy = pool.call("/allocate", {"image": base_image})
        # busy runs one call longer than the TTL: an in-flight call keeps its lease
        busy_result: dict[str, Any] = {}
        runner = threading.Thread(
            target=lambda: busy_result.update(
                pool.call(
                    "/exec",
                    {"lease_id": busy["lease_id"], "command": f"sleep {ttl + 4:g}; echo done", "timeout": 60},
                )
            )
        )
        runner.start()
        idle, doomed = (pool.call("/allocate", {"image": base_image}) for _ in range(2))
        docker_client.containers.get(doomed["container_id"]).remove(force=True)  # dies behind the pool's back
        wait_gone(docker_client, idle["container_id"], timeout=120)  # reaped: no heartbeat for > TTL
        runner.join(120)
        assert busy_result.get("output") == "done\n"
        assert pool.post("/exec", {"lease_id": idle["lease_id"], "command": "true"}).status_code == 404
        assert (
            pool.call("/exec", {"lease_id": kept["lease_id"], "command": "echo alive"})["output"] == "alive\n"
        )
        assert (
            pool.call("/exec", {"lease_id": busy["lease_id"], "command": "echo alive"})["output"] == "alive\n"
        )
    finally:
        stop.set()
        beater.join(30)
    assert metric(pool, 'swe_pool_leases_reclaimed_total{reason="ttl"}') >= 1
    # the batch touch reported the removed container missing: its lease answers 410 (or 404 once reaped)
    lost = pool.post("/exec", {"lease_id": doomed["lease_id"], "command": "true"})
    assert lost.status_code in (404, 410) and lost.json()["lease_lost"] is True
    assert metric(pool, 'swe_pool_leases_reclaimed_total{reason="container_gone"}') == 1


async def test_node_down_fails_fast_then_rejoins(fleet, pool_factory, docker_client, base_image):
    a, b = fleet(2)
    pool = pool_factory([a, b])
    leases = [pool.call("/allocate", {"image": base_image}) for _ in range(4)]
    on_a, dropped = [lease for lease in leases if lease["node"] == a.url]  # least loaded: two each
    pool.call("/write_file", {"lease_id": on_a["lease_id"], "path": "/tmp/mark", "content": "still here"})

    a.kill()
    config = EnvClientConfig(pool_url=pool.url, token=pool.token, retries=2, backoff=0.1)
    async with EnvClient(config) as client:
        lease = Lease(client, on_a)
        t0 = time.monotonic()
        with pytest.raises(FleetUnavailable, match="down"):
            await lease.exec("echo hi", timeout=30)
        assert time.monotonic() - t0 < 20  # failed fast: not after the command's 30 s
    pool.wait_until(lambda st: not next(n for n in st["nodes"] if n["url"] == a.url)["healthy"], timeout=5)
    resp = pool.post("/read_file", {"lease_id": on_a["lease_id"], "path": "/tmp/mark"})
    assert resp.status_code == 503 and resp.json()["node_down"] is True and a.url in resp.json()["error"]
    assert [pool.call("/allocate", {"image": base_image})["node"] for _ in range(2)] == [b.url, b.url]
    assert pool.call("/heartbeat", {"lease_id": on_a["lease_id"]})["node_healthy"] is False
    assert metric(pool, f'swe_pool_node_up{{node="{a.url}"}}') == 0
    closed = pool.call("/close", {"lease_id": dropped["lease_id"]})  # released now, container left behind
    assert closed["released"] is True and closed["node_down"] is True and "returns" in closed["message"]

    a.restart()  # same port and server id: adopts its containers
    pool.wait_until(lambda st: all(n["healthy"] for n in st["nodes"]), timeout=10)
    assert (
        pool.call("/read_file", {"lease_id": on_a["lease_id"], "path": "/tmp/mark"})["content"]
        == "still here"
    )
    wait_gone(docker_client, dropped["container_id"])  # the rejoining node was reconciled
    assert pool.call("/allocate", {"image": base_image})["node"] == a.url  # least loaded again


def test_pool_restart_keeps_leases_and_destroys_orphans(fleet, pool_factory, docker_client, base_image):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    kept, doomed = (pool.call("/allocate", {"image": base_image}) for _ in range(2))
    pool.call("/write_file", {"lease_id": kept["lease_id"], "path": "/tmp/mark", "content": "x"})
    pool.kill()  # kill -9: nothing released

    orphan = srv.post(
        "/container/create", {"image": base_image, "owner": pool.pool_id, "lease_id": "ghost"}
    ).json()
    foreign = srv.post("/container/create", {"image": base_image, "owner": "another-pool"}).json()
    docker_client.containers.get(doomed["container_id"]).remove(force=True)
    pool.start()  # same port, id and database

    assert gone(docker_client, orphan["container_id"])  # reconciled before the first request
    assert not gone(docker_client, foreign["container_id"])  # not ours: untouched
    assert pool.call("/read_file", {"lease_id": kept["lease_id"], "path": "/tmp/mark"})["content"] == "x"
    lost = pool.post("/exec", {"lease_id": doomed["lease_id"], "command": "true"})
    assert lost.status_code == 410 and "gone" in lost.json()["error"]
    assert pool.status()["totals"]["leases"] == 2  # the lost one stays a tombstone until closed
    pool.call("/close", {"lease_id": doomed["lease_id"]})
    assert [c.id for c in containers_of(docker_client, pool)] == [kept["container_id"]]


def test_shutdown_releases_everything_unless_told_to_keep(fleet, pool_factory, docker_client, base_image):
    a, b = fleet(2)
    pool = pool_factory([a, b])
    for _ in range(3):
        pool.call("/allocate", {"image": base_image})
    assert len(containers_of(docker_client, pool)) == 3
    assert pool.terminate()
    assert containers_of(docker_client, pool) == []
    with sqlite3.connect(pool.db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM leases").fetchone() == (0,)

    pool.start("--keep-leases-on-exit")  # a rolling restart keeps the leases
    lid = pool.call("/allocate", {"image": base_image})["lease_id"]
    assert pool.terminate()
    assert len(containers_of(docker_client, pool)) == 1
    pool.start()
    assert pool.call("/exec", {"lease_id": lid, "command": "echo back"})["output"] == "back\n"
    assert pool.terminate()
    assert containers_of(docker_client, pool) == []


async def test_long_call_does_not_block_others(fleet, pool_factory, docker_client, base_image):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    slow, quick = (pool.call("/allocate", {"image": base_image}) for _ in range(2))
    inside_slow = docker_client.containers.get(slow["container_id"])
    async with httpx.AsyncClient(base_url=pool.url, headers=pool.headers, timeout=120) as http:
        long_call = asyncio.create_task(
            http.post(
                "/evaluate",
                json={
                    "lease_id": slow["lease_id"],
                    "patch": "",
                    # runs until the test lets it finish: nothing here depends on how fast the machine is
                    "eval_script": "touch /tmp/started; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo slow",
                    "timeout": 110,
                },
                headers={CREDENTIAL_HEADER: slow["credential"]},
            )
        )
        while inside_slow.exec_run("test -e /tmp/started").exit_code != 0:
            assert not long_call.done(), long_call.result().text
            await asyncio.sleep(0.1)
        short = await http.post(
            "/exec",
            json={"lease_id": quick["lease_id"], "command": "echo quick"},
            headers={CREDENTIAL_HEADER: quick["credential"]},
        )
        status = await http.get("/status")
        assert short.json()["output"] == "quick\n" and status.status_code == 200
        assert not long_call.done()  # answered while the long call still runs
        inside_slow.exec_run("touch /tmp/go")
        result = (await long_call).json()
    assert result["returncode"] == 0 and "slow" in result["test_log"]
