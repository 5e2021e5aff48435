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


def test_a_killed_parent_leaves_no_server_behind():
    """SIGKILL of the process holding the fleet (a test run killed) takes its pool and nodes with it at once:
    the pool does not first try to release its leases on nodes that died too (its store still holds them)."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    script = (
        "import asyncio, time\n"
        "from swe_rl.fleet.client import EnvClient, EnvClientConfig\n"
        "from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet\n"
        "async def hold(fleet):\n"
        "    client = EnvClient(EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token))\n"
        "    for i in range(3):\n"
        "        await client.allocate('swe-rl/any:latest')\n"
        "with MemoryFleet(nodes=2) as fleet:\n"
        "    asyncio.run(hold(fleet))\n"
        "    print(fleet.pool.pid, fleet.helper.pid, fleet.log_dir, flush=True)\n"
        "    time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        pool_pid, helper_pid, log_dir = holder.stdout.readline().split()
        pids = [int(pool_pid), int(helper_pid)]
    finally:
        holder.kill()
        holder.wait(30)
    deadline = time.monotonic() + 60  # a bound on waiting for the kernel's signal, not a speed test
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if _running(p)]
    for pid in alive:  # leave nothing behind even when the assertion fails
        os.kill(pid, signal.SIGKILL)
    try:
        assert alive == []
        with sqlite3.connect(Path(log_dir) / "leases.db") as db:
            assert db.execute("SELECT COUNT(*) FROM leases").fetchone() == (3,)  # killed, not shut down
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_nodes_alone_remove_their_own_state_dir(tmp_path):
    """`python -m swe_rl.fleet.fakes.simulated_fleet` without --state-dir makes a temporary one: gone after SIGTERM;
    the nodes share one server and each answers on its own port."""
    import json
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "SWE_EXEC_TOKEN": "t" * 32, "TMPDIR": str(tmp_path)}
    helper = subprocess.Popen(
        [sys.executable, "-m", "swe_rl.fleet.fakes.simulated_fleet", "--nodes", "3"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert helper.stdout is not None
        started = json.loads(helper.stdout.readline())
        assert [p.name for p in tmp_path.iterdir()][0].startswith("swe-rl-memory-state-")
        ids = [httpx.get(u + "/healthz", timeout=30).json()["server_id"] for u in started["urls"]]
        assert ids == started["server_ids"] and len(set(ids)) == 3
    finally:
        helper.send_signal(signal.SIGTERM)
        code = helper.wait(60)
        helper.stdout.close()  # type: ignore[union-attr]
    assert code == 0 and list(tmp_path.iterdir()) == []


def test_inline_nodes_serve_a_lease_direct_and_routed():
    """The inline loop (`inline_loop.py`) behind the real exec server app: allocate, a direct exec, a
    routed one, close, as with waitress's own loop."""
    import asyncio

    from swe_rl.fleet.client import EnvClient, EnvClientConfig

    async def one(fleet: MemoryFleet, direct: bool) -> None:
        client = EnvClient(EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, direct=direct))
        try:
            lease = await client.allocate("swe-rl/any:latest")
            try:
                result = await lease.exec("echo hi")
                assert result.returncode == 0 and not result.timed_out
            finally:
                await lease.close()
        finally:
            await client.aclose()

    with MemoryFleet(nodes=2, inline=True) as fleet:
        for direct in (True, False):
            asyncio.run(one(fleet, direct))
        status = httpx.get(
            fleet.pool_url + "/status",
            headers={"Authorization": f"Bearer {fleet.operator_token}"},
            timeout=30,
        )
        assert status.json()["totals"]["leases"] == 0
