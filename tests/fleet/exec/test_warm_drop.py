"""Nothing keeps starting in the background for a warm spec that cannot start (real Docker)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from tests.conftest import BASE_IMAGE

FAST_WARM = {"SWE_EXEC_WARM_INTERVAL": "0.2"}


def wait_for(predicate: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} not met within {timeout}s"
        time.sleep(0.2)
    return value


def ok(resp) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_spec_docker_refuses_is_dropped_at_once_and_logged_once(exec_server_factory, docker_client):
    srv = exec_server_factory(**FAST_WARM)
    spec = {"image": BASE_IMAGE, "workdir": "/etc/passwd/sub"}  # only the daemon can tell: through a file
    ok(srv.post("/warm", {**spec, "count": 2}))
    status = wait_for(lambda: (st := srv.get("/status").json())["warm_dropped"] and st, what="spec dropped")
    (dropped,) = status["warm_dropped"]
    assert dropped["image"] == BASE_IMAGE and dropped["workdir"] == "/etc/passwd/sub" and dropped["reason"]
    assert status["warm_targets"] == [] and status["warm_stats"]["dropped"] == 1
    wait_for(lambda: srv.get("/healthz").json()["warm_starting"] == 0, what="starts in flight done")
    failed = srv.get("/status").json()["warm_stats"]["failed"]
    assert failed <= 2  # the starts already in flight when the first failed, no more
    time.sleep(2)  # no retries behind it
    status = srv.get("/status").json()
    assert status["warm_stats"]["failed"] == failed and status["warm_stats"]["started"] == 0
    assert srv.get("/healthz").json()["warm_dropped"] == 1
    # asking again is declined (until a create of that spec succeeds), not started again
    again = ok(srv.post("/warm", {**spec, "count": 2}))
    assert again["accepted"] == 0 and again["dropped"]
    assert srv.get("/status").json()["warm_targets"] == []
    assert srv.log_path.read_text().count("warm spec of") == 1
    assert (
        docker_client.containers.list(all=True, filters={"label": f"swe-rl.exec-server={srv.server_id}"})
        == []
    )


def test_spec_failing_n_times_in_a_row_is_dropped(exec_server_factory, docker_client):
    srv = exec_server_factory(SWE_EXEC_MAX_CONTAINERS="1", SWE_EXEC_WARM_MAX_FAILURES="2", **FAST_WARM)
    image = f"swe-rl/h17-vanishing:{secrets.token_hex(4)}"
    docker_client.images.get(BASE_IMAGE).tag(image)
    try:
        held = ok(
            srv.post("/container/create", {"image": BASE_IMAGE})
        )  # the node is full: nothing starts yet
        ok(srv.post("/warm", {"image": image, "count": 1}))
        docker_client.images.remove(image)  # gone before the refiller gets room
        ok(srv.post("/container/destroy", {"container_id": held["container_id"]}))
        status = wait_for(
            lambda: (st := srv.get("/status").json())["warm_dropped"] and st,
            timeout=40,
            what="spec dropped after two failures",
        )
        assert status["warm_dropped"][0]["failures"] == 2 and status["warm_stats"]["failed"] == 2
        assert "not found" in status["warm_dropped"][0]["reason"]
    finally:
        try:
            docker_client.images.remove(image)
        except Exception:  # noqa: BLE001 - already removed by the test
            pass


def test_pool_cancels_warm_targets_of_a_failed_allocate_and_reports_drops(fleet, pool_factory, docker_client):
    (srv,) = fleet(1, **FAST_WARM)
    pool = pool_factory([srv], SWE_POOL_WARM_MIN="2")
    resp = pool.post("/allocate", {"image": BASE_IMAGE, "workdir": "/etc/passwd/sub"})
    assert resp.status_code == 400 and not resp.json().get("node_down"), resp.text
    wait_for(lambda: "swe_pool_warm_cancelled_total 1" in pool.get("/metrics").text, what="warm cancelled")
    wait_for(lambda: srv.get("/status").json()["warm_targets"] == [], what="no warm target on the node")
    time.sleep(1.5)
    assert (
        docker_client.containers.list(all=True, filters={"label": f"swe-rl.exec-server={srv.server_id}"})
        == []
    )
    # the node's own drop (it may have tried once before the cancel) shows in the pool's status and metrics
    dropped = srv.get("/healthz").json()["warm_dropped"]
    pool.wait_until(lambda st: st["nodes"][0]["warm_dropped"] == dropped)
    assert f'swe_pool_node_warm_dropped{{node="{srv.url}"}} {dropped}' in pool.get("/metrics").text
