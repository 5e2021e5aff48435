"""The fleet over TLS, with a CA the test makes: a pool and an exec server (in-memory backend) serving
HTTPS, a client that trusts the CA, and the attacks that must fail: a client without the CA or with
another, plain HTTP to either server, a pool that does not trust the node's CA. Recording relays sit on
both hops (client -> pool -> node) and check that no token crosses in clear text.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.errors import TlsRefused
from swe_rl.fleet.tls import client_context
from tests.conftest import ROOT, free_port
from tests.fleet.tls_certs import TestCA
from tests.pool_fixtures import FAST

pytestmark = pytest.mark.docker  # starts a fleet (in-memory nodes): the fleet tier

BOUND = 120.0  # a bound on a loaded machine, not a speed check


class RecordingRelay:
    """A TCP relay on 127.0.0.1 that keeps every byte it passes, both ways."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._copy, args=(src, dst), daemon=True).start()

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    self.seen += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@dataclass
class TlsFleet:
    ca: TestCA
    other_ca: TestCA
    exec_port: int
    exec_proc: subprocess.Popen
    node_token: str
    node_relay: RecordingRelay
    pool_port: int
    pool_token: str
    pool_relay: RecordingRelay
    tmp: Path
    procs: list[subprocess.Popen]

    @property
    def pool_url(self) -> str:
        return f"https://127.0.0.1:{self.pool_relay.port}"

    def client(self, ca_file: str, **cfg) -> EnvClient:
        return EnvClient(
            EnvClientConfig(pool_url=self.pool_url, token=self.pool_token, ca_file=ca_file, **cfg)
        )


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


def _wait_https(
    url: str, ca: Path, proc: subprocess.Popen, log: Path, ok=lambda r: r.status_code < 500
) -> None:
    deadline = time.monotonic() + BOUND
    context = client_context(str(ca))
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
        try:
            if ok(httpx.get(url, verify=context, timeout=10)):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready: {log.read_text(errors='replace')[-3000:]}")


def start_exec(tmp: Path, ca: TestCA, token: str) -> tuple[int, subprocess.Popen, Path]:
    issued = ca.issue(f"node-{secrets.token_hex(3)}")
    port = free_port()
    log = tmp / f"exec-{port}.log"
    env = {
        "SWE_EXEC_BACKEND": "memory",
        "SWE_EXEC_TOKEN": token,
        "SWE_EXEC_SERVER_ID": f"pytest-tls-{secrets.token_hex(4)}",
        "SWE_EXEC_STATE_DIR": str(tmp / f"state-{port}"),
        "SWE_EXEC_SNAPSHOT_DIR": str(tmp / f"snapshots-{port}"),
    }
    args = [
        "swe_rl.fleet.exec.app",
        "--port",
        str(port),
        "--tls-cert",
        str(issued.cert),
        "--tls-key",
        str(issued.key),
    ]
    proc = _spawn(args, env, log)
    _wait_https(f"https://127.0.0.1:{port}/healthz", ca.path, proc, log)
    return port, proc, log


def start_pool(
    tmp: Path, node_url: str, node_token: str, pool_token: str, ca: TestCA, exec_ca: Path
) -> tuple[int, subprocess.Popen, Path]:
    issued = ca.issue(f"pool-{secrets.token_hex(3)}")
    port = free_port()
    log = tmp / f"pool-{port}.log"
    env = {
        **FAST,
        "SWE_POOL_EXEC_URLS": node_url,
        "SWE_EXEC_TOKEN": node_token,
        "SWE_POOL_TOKEN": pool_token,
        "SWE_POOL_PORT": str(port),
        "SWE_POOL_ID": f"pytest-tls-pool-{secrets.token_hex(4)}",
        "SWE_POOL_DB": str(tmp / f"pool-{port}.db"),
        "SWE_POOL_TLS_CERT": str(issued.cert),
        "SWE_POOL_TLS_KEY": str(issued.key),
        "SWE_POOL_EXEC_CA_FILE": str(exec_ca),
    }
    proc = _spawn(["swe_rl.fleet.pool.app"], env, log)
    _wait_https(
        f"https://127.0.0.1:{port}/healthz", ca.path, proc, log, ok=lambda r: r.status_code in (200, 503)
    )
    return port, proc, log


def _stop(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


@pytest.fixture(scope="module")
def tls_fleet(tmp_path_factory) -> Iterator[TlsFleet]:
    tmp = tmp_path_factory.mktemp("tls-fleet")
    ca, other = TestCA(tmp), TestCA(tmp, name="stranger")
    node_token, pool_token = "node-" + secrets.token_hex(16), "pool-" + secrets.token_hex(16)
    procs: list[subprocess.Popen] = []
    relays: list[RecordingRelay] = []
    try:
        exec_port, exec_proc, _ = start_exec(tmp, ca, node_token)
        procs.append(exec_proc)
        node_relay = RecordingRelay(exec_port)
        relays.append(node_relay)
        pool_port, pool_proc, pool_log = start_pool(
            tmp, f"https://127.0.0.1:{node_relay.port}", node_token, pool_token, ca, ca.path
        )
        procs.append(pool_proc)
        pool_relay = RecordingRelay(pool_port)
        relays.append(pool_relay)
        _wait_https(
            f"https://127.0.0.1:{pool_port}/healthz",
            ca.path,
            pool_proc,
            pool_log,
            ok=lambda r: r.json().get("ok"),
        )
        yield TlsFleet(
            ca,
            other,
            exec_port,
            exec_proc,
            node_token,
            node_relay,
            pool_port,
            pool_token,
            pool_relay,
            tmp,
            procs,
        )
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for relay in relays:
            relay.close()


def test_a_client_with_the_ca_leases_and_runs_commands_and_no_token_crosses_in_clear(tls_fleet):
    async def episode() -> str:
        async with tls_fleet.client(str(tls_fleet.ca.path)) as client:
            lease = await client.allocate("pytest/tls:1")
            try:
                result = await lease.exec("echo over-tls")
                assert result.returncode == 0
            finally:
                await lease.close()
            return lease.lease_id

    assert asyncio.run(episode())
    for relay, token in (
        (tls_fleet.pool_relay, tls_fleet.pool_token),
        (tls_fleet.node_relay, tls_fleet.node_token),
    ):
        seen = bytes(relay.seen)
        assert len(seen) > 1000  # the calls went through this hop
        assert token.encode() not in seen and b"Bearer" not in seen and b"over-tls" not in seen


@pytest.mark.parametrize("trust", ["system", "another CA"])
def test_a_client_that_does_not_trust_the_ca_is_refused_at_once_with_the_reason(tls_fleet, trust):
    ca_file = "" if trust == "system" else str(tls_fleet.other_ca.path)

    async def allocate() -> None:
        async with tls_fleet.client(ca_file, allocate_deadline=5, restart_grace=30) as client:
            await client.allocate("pytest/tls:1")

    with pytest.raises(TlsRefused, match="CERTIFICATE_VERIFY_FAILED.*SWE_CLIENT_CA_FILE"):
        asyncio.run(allocate())  # not retried until the allocate deadline, not an env_error


def test_plain_http_to_either_server_fails(tls_fleet):
    for port in (tls_fleet.exec_port, tls_fleet.pool_port):
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)
        context = client_context(str(tls_fleet.ca.path))
        assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=context, timeout=30).status_code == 200

    async def plain() -> None:
        cfg = EnvClientConfig(
            pool_url=f"http://127.0.0.1:{tls_fleet.pool_port}",
            token=tls_fleet.pool_token,
            retries=0,
            restart_grace=0,
        )
        async with EnvClient(cfg) as client:
            await client.status()

    with pytest.raises(Exception) as raised:
        asyncio.run(plain())
    assert tls_fleet.pool_token not in str(raised.value)


def test_a_pool_that_does_not_trust_the_nodes_ca_never_uses_the_node(tls_fleet):
    token = "pool2-" + secrets.token_hex(8)
    node_url = f"https://127.0.0.1:{tls_fleet.exec_port}"
    port, proc, _ = start_pool(
        tls_fleet.tmp, node_url, tls_fleet.node_token, token, tls_fleet.ca, tls_fleet.other_ca.path
    )
    try:
        context = client_context(str(tls_fleet.ca.path))
        deadline = time.monotonic() + BOUND
        node: dict = {}
        while time.monotonic() < deadline and "CERTIFICATE_VERIFY_FAILED" not in str(node.get("last_error")):
            status = httpx.get(
                f"https://127.0.0.1:{port}/status",
                headers={"Authorization": f"Bearer {token}"},
                verify=context,
                timeout=30,
            ).json()
            node = next(n for n in status["nodes"] if n["url"] == node_url)
            assert not node["healthy"], node
            time.sleep(0.2)
        assert "CERTIFICATE_VERIFY_FAILED" in str(node.get("last_error")), node
    finally:
        _stop(proc)


def test_the_exec_server_over_tls_stops_cleanly_on_sigterm(tmp_path):
    ca = TestCA(tmp_path)
    _, proc, log = start_exec(tmp_path, ca, "tok-" + secrets.token_hex(8))
    assert _stop(proc) == 0, log.read_text(errors="replace")[-2000:]
    assert "exec server" in log.read_text() and "stopped" in log.read_text()
