"""A node updated under an episode drops nothing: SIGTERM drains it (its running command finishes, new
leases go to the other node), a call on its lease made while it drains or restarts waits in the pool, and
the restarted node adopts the lease's container and serves it (real pool and exec server processes, real
containers)."""

from __future__ import annotations

import signal
import threading

from swe_rl.fleet.protocol import LABEL_LEASE
from tests.conftest import BASE_IMAGE

BOUND = 180.0  # only a hang reaches it


def test_a_node_restart_under_an_episode_loses_no_call(fleet, pool_factory, docker_client):
    first, second = fleet(2, SWE_EXEC_DRAIN_SECONDS="300")
    pool = pool_factory([first, second])
    lease = pool.call("/allocate", {"image": BASE_IMAGE})
    node = first if lease["node"] == first.url else second
    other = second if node is first else first
    lid = lease["lease_id"]
    answers: dict[str, dict] = {}

    def call(name: str, command: str) -> threading.Thread:
        body = {"lease_id": lid, "command": command, "timeout": 300}
        thread = threading.Thread(
            target=lambda: answers.update({name: pool.call("/exec", body, timeout=BOUND)})
        )
        thread.start()
        return thread

    running = call("long", "touch /tmp/started; while [ ! -f /tmp/go ]; do sleep 0.1; done; echo finished")
    later = None
    try:
        while pool.call("/exec", {"lease_id": lid, "command": "test -f /tmp/started"})["returncode"]:
            pass
        node.proc.send_signal(signal.SIGTERM)  # an update begins
        pool.wait_until(lambda st: any(n["url"] == node.url and n["draining"] for n in st["nodes"]), BOUND)
        assert pool.call("/allocate", {"image": BASE_IMAGE})["node"] == other.url  # new work goes elsewhere
        later = call("later", "cat /tmp/go && echo same")  # held by the pool while the node drains
        # the running command ends on its own (the test's own docker exec, not a call through the fleet)
        (target,) = docker_client.containers.list(filters={"label": f"{LABEL_LEASE}={lid}"})
        target.exec_run(["touch", "/tmp/go"])
        running.join(BOUND)
        assert answers["long"]["output"].strip() == "finished"
        assert node.proc.wait(BOUND) == 0  # drained: the held call did not keep it up
        assert "later" not in answers  # still waiting in the pool, not failed
        node.restart()
    finally:
        running.join(BOUND)
        if later is not None:
            later.join(BOUND)
    assert answers["later"]["returncode"] == 0 and answers["later"]["output"].strip() == "same"
