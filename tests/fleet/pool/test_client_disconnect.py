"""A client that goes away mid-request is not a pool error: one quiet line, no traceback, the pool serves on."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, free_port, wait_http


@pytest.fixture
def pool_alone(tmp_path) -> tuple[str, str, Path]:
    """A real pool server subprocess whose one exec server never answers (no Docker needed)."""
    port, token = free_port(), secrets.token_hex(16)
    log_path = tmp_path / "pool.log"
    env = {
        **os.environ,
        "SWE_POOL_EXEC_URLS": f"http://127.0.0.1:{free_port()}",
        "SWE_EXEC_TOKEN": secrets.token_hex(16),
        "SWE_POOL_TOKEN": token,
        "SWE_POOL_PORT": str(port),
        "SWE_POOL_HOST": "127.0.0.1",
        "SWE_POOL_ID": "pytest-disconnect",
        "SWE_POOL_DB": str(tmp_path / "leases.db"),
        "SWE_LOG_LEVEL": "INFO",
    }
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "swe_rl.fleet.pool.app"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        yield f"http://127.0.0.1:{port}", token, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def send_half_a_request(url: str, token: str, path: str) -> None:
    """Headers promising a 1,000-byte body, a few bytes of it, then the connection closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"lease_id": '
            ).encode()
        )


@pytest.mark.parametrize(("path", "then"), [("/heartbeat", 404), ("/exec", 403), ("/close", 403)])
def test_a_client_that_disconnects_mid_body_is_logged_quietly(pool_alone, path, then):
    url, token, log_path = pool_alone
    send_half_a_request(url, token, path)

    line = f"client disconnected during {path}"
    deadline = time.monotonic() + 30  # a bound on waiting for the line, not a speed requirement
    while line not in log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")
        time.sleep(0.05)
    log = log_path.read_text(errors="replace")
    assert "unhandled error" not in log and "Traceback" not in log and "ClientDisconnect" not in log
    assert f"INFO swe_pool_server: {line}" in log
    resp = httpx.post(url + path, json={"lease_id": "x"}, headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == then  # the pool serves on (an unknown lease: 404, or already closed)
    metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    op = path.strip("/")
    assert f'swe_pool_calls_total{{op="{op}",outcome="client_gone"}} 1' in metrics
