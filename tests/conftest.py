"""Shared fixtures: a real Docker daemon, the offline base image, real exec servers.

Every exec server a test starts gets a unique server id; its containers are
removed at teardown even when the test fails, and a session-end sweep removes
any container labelled with a test server id.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

# One module under both names: pytest loads this file as `conftest`, test modules import `tests.conftest`
# (and fixture plugins `conftest`); two copies kept two port walks that could hand out one port twice,
# and two session prefixes.
sys.modules.setdefault("conftest", sys.modules[__name__])
sys.modules.setdefault("tests.conftest", sys.modules[__name__])
ROOT = Path(__file__).resolve().parents[1]
# The shared fixtures of several test folders (tests/ is on pytest's pythonpath): registered once here,
# so a test names a fixture as a parameter and never imports it.
pytest_plugins = [
    "pool_fixtures",
    "agent_fixtures",
    "token_fixtures",
    "registry_fixtures",
    "postgres_fixtures",
    "slime_stub",
    "upstream_slime",
    "swebench_versions",
]
BASE_IMAGE = os.environ.get("SWE_BASE_IMAGE", "swe-rl/base:bookworm")
# Per-session prefix: the end-of-session sweep never touches another pytest run's containers. It names
# the session's pid, so a later session can sweep what a killed one (SIGKILL, a CI timeout) left behind.
TEST_ID_PREFIX = f"pytest-p{os.getpid()}-{secrets.token_hex(3)}-"
_PREFIX_PID = re.compile(r"pytest-p(\d+)-[0-9a-f]{6}-")


def _session_dead(text: str) -> bool:
    """True when `text` carries a test-session prefix whose pytest process is gone."""
    match = _PREFIX_PID.search(text)
    if match is None:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def sweep_dead_sessions(client) -> None:
    """Remove the containers and internal networks of test sessions that died without their teardown."""
    import docker

    for cid, labels in _managed_containers(client):
        if _session_dead(labels.get("swe-rl.exec-server", "")):
            try:
                client.api.remove_container(cid, force=True)
            except docker.errors.APIError:
                pass
    for net in client.networks.list(filters={"label": "swe-rl.test=1"}):
        if _session_dead(net.name + "-"):
            try:
                net.remove()
            except docker.errors.APIError:  # still in use: left for the next sweep
                pass


def _port_block() -> Iterator[int]:
    """This test process's own ports, below the kernel's ephemeral range (32768+ by default).

    Why: a port found free with ``bind(0)`` is in the ephemeral range, so between that check and the
    server's own bind another pytest-xdist worker's ``bind(0)``, or any outgoing connection, could take
    it (seen: a server exiting with 1 before answering). Each worker (``PYTEST_XDIST_WORKER`` gwN) walks
    its own block of 2,000 ports from a random start; a port still taken by something else is skipped.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 8 + os.getpid() % 3
    first = 10000 + (index % 11) * 2000
    offset = secrets.randbelow(2000)
    for step in itertools.count():
        yield first + (offset + step) % 2000


_PORTS = _port_block()


def free_port() -> int:
    """A loopback port for a server a test starts (see `_port_block`)."""
    for port in _PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("unreachable")


def wait_http(
    url: str, timeout: float = 180.0, proc: subprocess.Popen | None = None, log: Path | None = None
) -> None:
    """Wait for a server started by a test. A bound, not a speed check: a machine loaded far over its cores
    (seen: load 300 on 2 cores) takes minutes to start a Python server; a dead one fails at once (`proc`),
    with the tail of its `log`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}\n{tail}")
        try:
            if httpx.get(url, timeout=10).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def remove_containers_of(server_id_prefix: str) -> None:
    import docker
    import requests

    client = docker.from_env()
    for cid, labels in _managed_containers(client):
        if labels.get("swe-rl.exec-server", "").startswith(server_id_prefix):
            try:
                client.api.remove_container(cid, force=True)
            except (docker.errors.APIError, requests.RequestException):  # gone, or its removal under way
                pass


def _managed_containers(client) -> list[tuple[str, dict[str, str]]]:
    """(id, labels) of every container our exec servers made, from one listing call: the SDK's
    `containers.list` inspects each container too, and an inspect waits for a container another test is
    killing (seen: a 60 s read timeout in a teardown under CI's load)."""
    found = client.api.containers(all=True, filters={"label": "swe-rl.managed-by=swe-rl"})
    return [(c["Id"], c.get("Labels") or {}) for c in found]


@pytest.fixture(scope="session")
def docker_client():
    subprocess.run(["bash", str(ROOT / "scripts/ensure_docker.sh")], check=True)
    import docker

    client = docker.from_env()
    sweep_dead_sessions(client)
    yield client
    remove_containers_of(TEST_ID_PREFIX)
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    try:
        docker_client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        subprocess.run(
            ["bash", str(ROOT / "scripts/build_base_image.sh")],
            check=True,
            env={**os.environ, "SWE_BASE_IMAGE": BASE_IMAGE},
        )
    return BASE_IMAGE


@pytest.fixture(scope="session")
def internal_network(docker_client) -> str:
    """A Docker network with no egress (``--internal``), unique to this session, removed at its end:
    tests that need a network trait (a connect timeout that hangs) run on it."""
    name = f"swe-rl-i14-{TEST_ID_PREFIX.strip('-')}"
    net = docker_client.networks.create(name, driver="bridge", internal=True, labels={"swe-rl.test": "1"})
    yield name
    remove_test_network(net)


def remove_test_network(net: Any) -> None:
    """Remove a test's network after the session's containers (whatever is still connected is cut off).
    Tried a few times: a container being removed can still hold an endpoint for a moment (seen: the network
    of tests/fleet/test_network_full.py left behind now and then)."""
    import docker.errors

    remove_containers_of(TEST_ID_PREFIX)
    for _ in range(20):
        try:
            net.reload()
            for c in net.containers:
                net.disconnect(c, force=True)
            net.remove()
            return
        except docker.errors.NotFound:  # already gone
            return
        except docker.errors.APIError:
            time.sleep(0.5)


@dataclass
class ExecServerProc:
    url: str
    token: str
    server_id: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    env: dict = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def post(self, path: str, json=None, **kw) -> httpx.Response:
        return httpx.post(
            self.url + path, json=json, headers=self.headers, timeout=kw.pop("timeout", 120), **kw
        )

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers, timeout=kw.pop("timeout", 30), **kw)

    def kill(self) -> None:
        """Hard kill (simulates a node dying); its containers stay until teardown."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def restart(self) -> None:
        """Start again on the same port and server id (adopts its containers)."""
        self.stop()
        self.proc = _spawn_exec(self.port, self.server_id, self.token, self.log_path, self.env)
        wait_http(self.url + "/healthz", proc=self.proc)


def _spawn_exec(port: int, server_id: str, token: str, log_path: Path, env: dict) -> subprocess.Popen:
    full_env = {
        **os.environ,
        "SWE_EXEC_TOKEN": token,
        "SWE_EXEC_SERVER_ID": server_id,
        "SWE_EXEC_PORT": str(port),
        "SWE_EXEC_HOST": "127.0.0.1",
        **env,
    }
    log = open(log_path, "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "swe_rl.fleet.exec.app"],
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


def start_exec_server(directory: Path, started: list[ExecServerProc], **env: str) -> ExecServerProc:
    """Start one real exec server (a subprocess on loopback, its log under `directory`), appended to
    `started` before it answers so that the caller stops it even when it never does."""
    port = free_port()
    server_id = f"{TEST_ID_PREFIX}{secrets.token_hex(4)}"
    token = env.pop("token", None) or secrets.token_hex(16)
    env.setdefault("SWE_EXEC_STATE_DIR", str(directory / f"state-{server_id}"))  # not the machine's
    log_path = directory / f"exec-{server_id}.log"
    proc = _spawn_exec(port, server_id, token, log_path, env)
    srv = ExecServerProc(f"http://127.0.0.1:{port}", token, server_id, port, proc, log_path, env)
    started.append(srv)
    wait_http(srv.url + "/healthz", proc=proc, log=log_path)
    return srv


def stop_exec_servers(started: list[ExecServerProc]) -> None:
    for srv in started:
        srv.stop()
        remove_containers_of(srv.server_id)


@pytest.fixture
def exec_server_factory(docker_client, base_image, tmp_path):
    """Start real exec servers (subprocesses on loopback); all cleaned up after the test."""
    started: list[ExecServerProc] = []

    def start(**env: str) -> ExecServerProc:
        return start_exec_server(tmp_path, started, **env)

    yield start
    stop_exec_servers(started)


@pytest.fixture
def exec_server(exec_server_factory) -> ExecServerProc:
    return exec_server_factory()


# --------------------------------------------------------------------------- test tiers

DOCKER_FIXTURES = frozenset({"docker_client"})
"""Every fixture that reaches the Docker daemon depends on this one (base_image, exec servers, pools, ...)."""


def pytest_collection_modifyitems(config, items):
    """Mark every test that uses a Docker fixture ``docker``, so ``-m "not docker"`` is the fast tier;
    tests that start fleets another way carry ``pytestmark = pytest.mark.docker`` themselves."""
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
