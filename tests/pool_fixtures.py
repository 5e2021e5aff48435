"""Pool server fixtures: real pool subprocesses over real exec servers.

Registered for every test by `tests/conftest.py` (`pytest_plugins`): `fleet`, `pool_factory`.
Every pool a test starts is stopped at teardown (SIGTERM, which releases its
leases; then SIGKILL if it hangs) before the exec servers and their containers go.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from swe_rl.fleet.lease_credential import CREDENTIAL_HEADER
from tests.conftest import ROOT, ExecServerProc, free_port, wait_http

FLEET_TOKEN = "pytest-fleet-" + secrets.token_hex(8)
"""One token for every exec server of a test: the pool sends a single exec token."""

FAST = {
    "SWE_POOL_HEALTH_INTERVAL": "0.5",
    "SWE_POOL_NODE_DOWN_AFTER": "2",
    "SWE_POOL_REAP_INTERVAL": "0.5",
    "SWE_POOL_CONNECT_TIMEOUT": "2",
    "SWE_POOL_SHUTDOWN_GRACE": "3",
    # No implicit warming: these tests count containers by their owner label, which a claimed warm
    # container cannot carry, and time allocations. Warm pools have their own tests (tests/fleet/exec/test_warm_pool.py).
    "SWE_POOL_WARM_MIN": "0",
}


@dataclass
class PoolProc:
    url: str
    token: str
    port: int
    pool_id: str
    db_path: Path
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    started: list[subprocess.Popen] = field(default_factory=list)
    operator_token: str = field(default_factory=lambda: "pytest-operator-" + secrets.token_hex(8))
    credentials: dict[str, str] = field(default_factory=dict)
    """The credential of each lease this helper allocated (`post` sends it on calls naming the lease)."""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def operator_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.operator_token}"}

    def post(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        """POST as the lease holder: a call naming a lease this helper allocated carries its credential
        (pass `headers` to send exactly those instead)."""
        headers = kw.pop("headers", None)
        if headers is None:
            headers = dict(self.headers)
            lease_id = json.get("lease_id") if isinstance(json, dict) else None
            if path.startswith("/leases/"):
                lease_id = path.split("/")[2]
            if isinstance(lease_id, str) and lease_id in self.credentials:
                headers[CREDENTIAL_HEADER] = self.credentials[lease_id]
        resp = httpx.post(self.url + path, json=json, headers=headers, timeout=kw.pop("timeout", 120), **kw)
        if path == "/allocate" and resp.status_code == 200:
            data = resp.json()
            if isinstance(data, dict) and data.get("credential"):
                self.credentials[data["lease_id"]] = data["credential"]
        return resp

    def get(self, path: str, **kw: Any) -> httpx.Response:
        """GET with the operator token (`/status` lists the leases to it only) unless `headers` are given."""
        return httpx.get(
            self.url + path,
            headers=kw.pop("headers", self.operator_headers),
            timeout=kw.pop("timeout", 30),
            **kw,
        )

    def call(self, path: str, json: Any = None, **kw: Any) -> dict[str, Any]:
        """POST and insist on 200."""
        resp = self.post(path, json, **kw)
        assert resp.status_code == 200, (path, resp.status_code, resp.text)
        return resp.json()

    def status(self) -> dict[str, Any]:
        return self.get("/status").json()

    def start(self, *args: str) -> PoolProc:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swe_rl.fleet.pool.app", *args],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.started.append(self.proc)
        wait_http(self.url + "/healthz", proc=self.proc, log=self.log_path)
        return self

    def kill(self) -> None:
        """kill -9: the pool gets no chance to release anything."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> bool:
        """SIGTERM and wait; True when the pool shut down cleanly.

        uvicorn re-raises the signal after its shutdown, so a clean exit is -SIGTERM (or 0).
        """
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        return code in (0, -signal.SIGTERM)

    def wait_until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 15) -> dict[str, Any]:
        """Poll /status until predicate holds."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status()
            if predicate(st):
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s; status: {st}")
            time.sleep(0.2)

    def node(self, url: str) -> dict[str, Any]:
        return next(n for n in self.status()["nodes"] if n["url"] == url)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def fleet(exec_server_factory) -> Callable[..., list[ExecServerProc]]:
    """Start n exec servers sharing FLEET_TOKEN."""

    def start(n: int = 1, **env: str) -> list[ExecServerProc]:
        return [exec_server_factory(token=FLEET_TOKEN, **env) for _ in range(n)]

    return start


def new_pool(servers: list[ExecServerProc], directory: Path, **env: str) -> PoolProc:
    """A pool server over `servers` (fast health/reap settings), its database and log under `directory`;
    not started yet (`PoolProc.start`)."""
    port = free_port()
    tag = secrets.token_hex(4)
    pool = PoolProc(
        url=f"http://127.0.0.1:{port}",
        token="pytest-pool-" + secrets.token_hex(8),
        port=port,
        pool_id=f"pytest-pool-{tag}",
        db_path=directory / f"pool-{tag}.db",
        log_path=directory / f"pool-{tag}.log",
        env={},
    )
    pool.env = {
        "SWE_POOL_EXEC_URLS": ",".join(s.url for s in servers),
        "SWE_EXEC_TOKEN": FLEET_TOKEN,
        "SWE_POOL_TOKEN": pool.token,
        "SWE_POOL_OPERATOR_TOKEN": pool.operator_token,
        "SWE_POOL_PORT": str(port),
        "SWE_POOL_HOST": "127.0.0.1",
        "SWE_POOL_ID": pool.pool_id,
        "SWE_POOL_DB": str(pool.db_path),
        **FAST,
        **env,
    }
    return pool


def stop_pool(pool: PoolProc) -> None:
    """SIGTERM every process the pool ran (which releases its leases); SIGKILL one that hangs."""
    for proc in pool.started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def pool_factory(exec_server_factory, tmp_path) -> Any:
    """Start a pool server subprocess over given exec servers (fast health/reap settings)."""
    pools: list[PoolProc] = []

    def start(servers: list[ExecServerProc], *args: str, **env: str) -> PoolProc:
        pool = new_pool(servers, tmp_path, **env)
        pools.append(pool)
        return pool.start(*args)

    yield start
    for pool in pools:
        stop_pool(pool)


async def wait_for(check: Callable[[], Any], what: str, timeout: float) -> Any:
    """Poll the blocking `check` (in a thread) until it returns something true; a bound, not a speed test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(check)
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
