"""A node whose Docker daemon hangs: the pool marks it down from its health answer and fails the call
waiting on it at once (503 node_down: an environment failure), instead of after the call's own timeout.

A real pool and exec server; the exec server's Docker daemon is the real one behind a proxy that stops
answering (`tests/fleet/hanging_docker.py`)."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import BASE_IMAGE
from tests.fleet.hanging_docker import hanging_daemon

pytestmark = pytest.mark.docker

BOUND = 300.0  # only a hang reaches it


def test_a_call_waiting_on_a_hung_daemon_fails_as_node_down(fleet, pool_factory):
    with hanging_daemon() as proxy:
        (node,) = fleet(1, DOCKER_HOST=f"unix://{proxy.path}")
        pool = pool_factory([node])
        pool.wait_until(lambda st: st["nodes"][0]["healthy"], BOUND)  # its daemon is slower through the proxy
        lease = pool.call("/allocate", {"image": BASE_IMAGE})
        lid = lease["lease_id"]
        answer: dict = {}
        command = "touch /tmp/started; sleep 250; echo finished"
        call = threading.Thread(
            target=lambda: answer.update(
                resp=pool.post("/exec", {"lease_id": lid, "command": command, "timeout": 280}, timeout=BOUND)
            )
        )
        call.start()
        try:
            while pool.call("/exec", {"lease_id": lid, "command": "test -f /tmp/started"})["returncode"]:
                pass
            proxy.hang.set()  # the daemon stops answering under the running command
            call.join(BOUND)
            assert not call.is_alive()
        finally:
            proxy.hang.clear()
        resp = answer["resp"]
        # before: the call waited for its own timeout (280 s + margin), then a 504
        assert resp.status_code == 503 and resp.json()["node_down"] is True, resp.text
        assert "went down during the call" in resp.json()["error"]
        st = pool.status()
        assert not next(n for n in st["nodes"] if n["url"] == node.url)["healthy"]
