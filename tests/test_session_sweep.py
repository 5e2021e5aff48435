"""A test session killed before its teardown (SIGKILL, a CI timeout) leaves containers and an internal
network behind; the next session's `docker_client` fixture sweeps them, and never a live session's."""

from __future__ import annotations

import secrets
import subprocess
import sys

from tests.conftest import BASE_IMAGE, TEST_ID_PREFIX, sweep_dead_sessions


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_what_dead_sessions_left_and_keeps_live_ones(docker_client, base_image):
    dead = f"pytest-p{_dead_pid()}-{secrets.token_hex(3)}-"
    made = []
    try:
        for prefix in (dead, TEST_ID_PREFIX):
            labels = {"swe-rl.managed-by": "swe-rl", "swe-rl.exec-server": prefix + "sweep"}
            made.append(docker_client.containers.create(BASE_IMAGE, ["true"], labels=labels))
        net = docker_client.networks.create(
            f"swe-rl-i14-{dead.strip('-')}", driver="bridge", internal=True, labels={"swe-rl.test": "1"}
        )

        sweep_dead_sessions(docker_client)

        alive = {c.id for c in docker_client.containers.list(all=True, ignore_removed=True)}
        assert made[0].id not in alive  # the dead session's
        assert made[1].id in alive  # this (live) session's
        assert net.id not in {n.id for n in docker_client.networks.list()}
    finally:
        for c in made:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already swept
                pass
        for n in docker_client.networks.list(names=[f"swe-rl-i14-{dead.strip('-')}"]):
            n.remove()
