"""The simulated fleet keeps its logs, and prints their tail, when a test using it failed or a process died."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

pytestmark = pytest.mark.docker  # starts a (one-node, in-memory) fleet: the fleet tier


class Boom(Exception):
    pass


def test_a_clean_exit_removes_the_logs():
    with MemoryFleet(nodes=1) as fleet:
        assert httpx.get(fleet.pool_url + "/healthz", timeout=30).status_code == 200
        log_dir = fleet.log_dir
    assert log_dir is not None and not log_dir.exists()


def test_a_failed_test_keeps_the_logs_and_prints_their_tail(capsys):
    log_dir: Path | None = None
    try:
        with pytest.raises(Boom), MemoryFleet(nodes=1) as fleet:
            log_dir = fleet.log_dir
            raise Boom("the lease was lost")
        err = capsys.readouterr().err
        assert (
            log_dir is not None and (log_dir / "pool.log").exists() and (log_dir / "exec-nodes.log").exists()
        )
        assert f"logs kept in {log_dir} because the code using the fleet raised" in err
        assert f"of {log_dir / 'pool.log'}" in err and f"of {log_dir / 'exec-nodes.log'}" in err
        assert "MEMORY BACKEND" in err  # a line of the exec servers' log, printed
    finally:
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)


def test_a_pool_that_dies_keeps_the_logs(capsys):
    log_dir: Path | None = None
    try:
        with MemoryFleet(nodes=1) as fleet:
            log_dir = fleet.log_dir
            assert fleet.pool is not None
            fleet.pool.kill()
            fleet.pool.wait(30)
        err = capsys.readouterr().err
        assert log_dir is not None and log_dir.exists()
        assert "the pool server exited on its own with code -9" in err
    finally:
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)
