"""Once a node's drain is over, every call is refused before it starts: a 503 `not_started`, the node's
word that nothing ran, so the pool may send it again to the restarted node (exec/drain.py; no Docker:
the real app over the in-memory backend)."""

from __future__ import annotations

import secrets

from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.drain import Drain
from swe_rl.fleet.exec.manager import ContainerManager


def test_a_draining_node_serves_its_leases_and_refuses_everything_once_its_drain_ended(tmp_path):
    cfg = ExecConfig(token=secrets.token_hex(8), backend="memory", max_warm=0, state_dir=str(tmp_path))
    manager = ContainerManager(cfg)
    try:
        app = create_app(manager)
        client = app.test_client()
        auth = {"Authorization": f"Bearer {cfg.token}"}
        cid = client.post("/container/create", json={"image": "img:1"}, headers=auth).get_json()[
            "container_id"
        ]
        run = {"container_id": cid, "command": "echo ran"}
        drain: Drain = app.extensions["swe_drain"]
        drain.begin()
        create = client.post("/container/create", json={"image": "img:1"}, headers=auth)
        assert create.status_code == 503 and create.get_json()["not_started"] is True
        served = client.post(
            "/container/exec", json=run, headers=auth
        )  # a lease's call: served while draining
        assert served.status_code == 200 and served.get_json()["output"].strip() == "ran"
        drain.close()  # the calls in flight ended: the process exits next
        refused = client.post("/container/exec", json=run, headers=auth)
        assert refused.status_code == 503, refused.text
        assert refused.get_json() == {
            "error": "node stopping: the call was not started",
            "draining": True,
            "not_started": True,
        }
        assert drain.in_flight == 0  # refused before it was counted in flight
        health = client.get("/healthz")
        assert health.status_code == 200 and health.get_json()["draining"] is True
    finally:
        manager.stop()
        manager.backend.close()
