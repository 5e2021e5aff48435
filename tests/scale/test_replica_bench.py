"""bench/replica_bench.py at a small size: it runs end to end (a real PostgreSQL, two pool replicas, one
SIGKILLed, simulated nodes, client processes) and prints issue 50's last line with nothing lost or failed.
The figures themselves are the bench's to print, never asserted here (docs/fleet.md, "The bench")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the `replicas` extra (psycopg) is not installed")
pytestmark = [pytest.mark.docker, pytest.mark.slow]  # a simulated fleet and PostgreSQL, as a subprocess

BENCH = Path(__file__).parents[2] / "bench" / "replica_bench.py"
LAST = re.compile(
    r"^scale: 300 leases, 4 nodes, \d+ execs/s, head CPU per exec [\d.]+ ms, "
    r"overhead p50 [\d.]+ ms p99 [\d.]+ ms, replica kill: lost 0, failed 0$"
)


def run_bench(*extra: str) -> list[str]:
    small = ["--leases", "300", "--nodes", "4", "--rate", "40", "--seconds", "6", "--burst", "50"]
    done = subprocess.run(
        [sys.executable, str(BENCH), *small, *extra], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def test_the_bench_prints_its_line_with_nothing_lost_and_each_lease_called_once_first():
    lines = run_bench()
    assert LAST.match(lines[-1]), lines[-1]
    assert any(line.startswith("each lease's first exec (untimed) in ") for line in lines), lines
    execs = next(line for line in lines if line.startswith("execs: "))
    assert re.match(r"execs: \d+ ok, 0 failed, .*leases B holds after the heartbeats: 300$", execs), execs
    assert "head CPU per exec: the pool replicas " in "\n".join(lines)


def test_cold_credentials_leave_each_leases_first_call_to_the_timed_phase():
    lines = run_bench("--cold-credentials", "--client-processes", "2")
    assert LAST.match(lines[-1]), lines[-1]
    assert not any("first exec" in line for line in lines), lines
    assert "2 client and " in lines[0], lines[0]
