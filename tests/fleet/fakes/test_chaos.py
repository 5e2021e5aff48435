"""Every fault of bench/chaos_bench.py as a test: a batch of real episodes (one gold, one noop) through the
real client, pool and agent loop, the fault injected while both have a command in flight, and the
invariants checked after it (docs/fleet.md, "Faults"):

- an episode ends resolved / unresolved / no_patch only when its grading ran, else env_error with a reason;
- no episode raises or hangs (nothing is lost silently);
- once the batch is over, no container of the fleet is left and the pool holds no lease.

The fleet's exec servers carry this session's prefix, so a killed session's containers are swept by the
next one (tests/conftest.py); the private daemon of ``daemon_restart`` and ``disk_full`` (and its tmpfs) is removed in a ``finally``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos_bench import FAULTS, fixture_instance, run_round
from tests.conftest import TEST_ID_PREFIX

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_mid_batch_scores_nothing_wrongly_and_loses_nothing(fault, base_image):
    report = await run_round(
        fault, episodes=2, instance=fixture_instance(), server_prefix=TEST_ID_PREFIX + "chaos"
    )
    assert not report.wrongly_scored, report.line()
    assert not report.lost_silently, report.line()
    assert report.leaked == 0 and report.pool_leases_left == 0, report.line()
    assert sum(report.statuses.values()) == 2, report.line()
    if fault == "grading_kill":  # the gold episode's grading
        assert report.statuses["env_error"] >= 1 and all(report.env_errors), report.line()
    # pool_kill: container calls go straight to the nodes (lease credentials), so a pool SIGKILL cuts no
    # exec in flight; an allocate it cuts is an env_error. Either way nothing is wrongly scored or lost.
    if fault == "grading_kill":
        assert all("died during the command" in reason for reason in report.env_errors), report.env_errors
    if fault == "slow_node":  # slowness is no failure
        assert report.statuses["env_error"] == 0, report.line()
    assert report.recovered < float("inf"), report.line()


def test_a_private_daemon_leaves_the_hosts_bridge_alone(tmp_path, docker_client):
    """moby removes the default bridge interface when its bridge is off: a private daemon in the host's network
    namespace deleted `docker0`, and every default-network container of the machine's daemon failed after it
    (a CI run lost 11 tests). The private daemon runs in a network namespace of its own."""
    from swe_rl.fleet.fakes.private_dockerd import PrivateDockerd

    def bridges() -> set[str]:
        return {p.name for p in Path("/sys/class/net").iterdir() if (p / "bridge").exists()}

    def gone() -> set[str]:
        """Bridges of `before` missing now, but for those of Docker networks removed meanwhile (another
        test's network: its `br-<id>` goes with it, which is no harm of the private daemon)."""
        live = {"br-" + n.id[:12] for n in docker_client.networks.list()}
        return {b for b in before - bridges() if not b.startswith("br-") or b in live}

    before = bridges()
    # A deep root too: its sockets once lived under it and passed the 107-byte limit of a unix socket's path
    # (the daemon did not start under CI's longer pytest folders).
    with PrivateDockerd(tmp_path / ("deep-folder-" * 8) / "d") as daemon:
        assert daemon.answers()
        daemon.kill()
        daemon.start()  # a restart deletes it again if anything does
        assert not gone(), f"gone while the private daemon ran: {gone()}"
    assert not gone(), f"gone after the private daemon: {gone()}"
