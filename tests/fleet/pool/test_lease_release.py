"""close releases the lease at once; the container is destroyed right after, off the request path,
and that destroy is guaranteed: retried while the node is away, and counted (real fleet, real Docker)."""

from __future__ import annotations

import time
from typing import Any

import docker.errors
from pool_fixtures import PoolProc

from tests.conftest import BASE_IMAGE


def gone(docker_client: Any, container_id: str) -> bool:
    try:
        docker_client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def wait_for(predicate: Any, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not met within {timeout}s"
        time.sleep(0.1)


def metric(pool: PoolProc, line_start: str) -> float:
    for line in pool.get("/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return 0.0


def test_close_releases_at_once_and_destroys_right_after(fleet, pool_factory, docker_client):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    leases = [pool.call("/allocate", {"image": BASE_IMAGE}) for _ in range(3)]
    for lease in leases:
        assert pool.call("/close", {"lease_id": lease["lease_id"]}) == {"ok": True, "released": True}
        # the lease is gone the moment close answers
        assert pool.post("/heartbeat", {"lease_id": lease["lease_id"]}).status_code == 404
    for lease in leases:
        wait_for(lambda cid=lease["container_id"]: gone(docker_client, cid), what="container destroyed")
    wait_for(lambda: metric(pool, "swe_pool_destroys_pending") == 0, what="no destroy pending")
    assert metric(pool, 'swe_pool_destroys_total{outcome="ok"}') == 3
    assert pool.status()["totals"]["leases"] == 0


def test_destroy_survives_exec_server_killed_between_close_and_destroy(fleet, pool_factory, docker_client):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    lease = pool.call("/allocate", {"image": BASE_IMAGE})
    srv.kill()  # kill -9: the node is gone before the pool's destroy reaches it
    closed = pool.call("/close", {"lease_id": lease["lease_id"]})
    assert closed["released"] is True
    assert not gone(docker_client, lease["container_id"])
    wait_for(lambda: metric(pool, 'swe_pool_destroys_total{outcome="retry"}') >= 1, what="a retried destroy")
    assert metric(pool, "swe_pool_destroys_pending") == 1
    srv.restart()  # adopts its containers; the pool's retry (or its reconciliation) removes this one
    wait_for(lambda: gone(docker_client, lease["container_id"]), timeout=60, what="container reaped")
    wait_for(lambda: metric(pool, "swe_pool_destroys_pending") == 0, what="no destroy pending")
    assert pool.status()["nodes"][0]["healthy"] is True
    assert pool.call("/allocate", {"image": BASE_IMAGE})["node"] == srv.url
