"""A node updated under an episode drops nothing: SIGTERM drains it (its running command finishes, new
leases go to the other node), a call made while it is down waits for it, and the restarted node adopts
the lease's container (real pool and exec server processes, real containers)."""

from __future__ import annotations

import signal
import threading

from tests.conftest import BASE_IMAGE

BOUND = 180.0  # only a hang reaches it


def test_a_node_restart_under_an_episode_loses_no_call(fleet, pool_factory):
    first, second = fleet(2, SWE_EXEC_DRAIN_SECONDS="300")
    pool = pool_factory([first, second])
    lease = pool.call("/allocate", {"image": BASE_IMAGE})
    node = first if lease["node"] == first.url else second
    other = second if node is first else first
    lid = lease["lease_id"]
    answers: dict[str, dict] = {}
    command = "touch /tmp/started; while [ ! -f /tmp/go ]; do sleep 0.1; done; echo finished"
    running = threading.Thread(
        target=lambda: answers.update(
            long=pool.call("/exec", {"lease_id": lid, "command": command, "timeout": 300}, timeout=BOUND)
        )
    )
    running.start()
    try:
        while pool.call("/exec", {"lease_id": lid, "command": "test -f /tmp/started"})["returncode"]:
            pass
        node.proc.send_signal(signal.SIGTERM)  # an update begins
        pool.wait_until(lambda st: any(n["url"] == node.url and n["draining"] for n in st["nodes"]), BOUND)
        assert pool.call("/allocate", {"image": BASE_IMAGE})["node"] == other.url  # new work goes elsewhere
        pool.call("/write_file", {"lease_id": lid, "path": "/tmp/go", "content": ""})
    finally:
        running.join(BOUND)
    assert answers["long"]["output"].strip() == "finished"
    assert node.proc.wait(BOUND) == 0
    # the node is down now; a call on its lease waits for it while the update restarts it
    later = threading.Thread(
        target=lambda: answers.update(
            later=pool.call("/exec", {"lease_id": lid, "command": "cat /tmp/go && echo same"}, timeout=BOUND)
        )
    )
    later.start()
    try:
        pool.wait_until(lambda st: any(n["url"] == node.url and not n["healthy"] for n in st["nodes"]), BOUND)
        assert "later" not in answers  # still waiting, not failed
        node.restart()
    finally:
        later.join(BOUND)
    assert answers["later"]["returncode"] == 0 and answers["later"]["output"].strip() == "same"
