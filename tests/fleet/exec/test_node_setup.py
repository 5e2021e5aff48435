"""server/setup_docker_node.sh for real: a node container with systemd as PID 1 installs the wheel and runs the unit.

The dry-run tests (test_deploy.py) only list the steps; this one runs them. A throwaway image
(the offline base image plus systemd and python3-venv) boots systemd; the repository's wheel and
a wheelhouse of its `server` extra (pip download on this host: no index inside the node) are
bind-mounted in, and the script installs the venv, the token, the env file and the unit, and
starts it. The node's Docker is the host daemon through the bind-mounted socket (a stand-in
`docker.service` checks the socket), so the exec server's task containers are host containers
under a unique test server id. The test then creates, execs in and destroys one container
through the node's exec server, and removes the node container, the image tag and the temp dir
whatever happens.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import BASE_IMAGE, ROOT, TEST_ID_PREFIX, remove_containers_of
from tests.package_copy import copy_package_sources

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NODE_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd systemd-sysv python3-venv \\
 && rm -rf /var/lib/apt/lists/*
# The node's Docker is the host daemon behind the bind-mounted socket: this docker.service only checks
# the socket is there (the unit Requires= it), and the dockerd stand-in keeps the script from apt-getting one.
COPY docker.service /etc/systemd/system/docker.service
COPY dockerd /usr/local/bin/dockerd
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""

DOCKER_SERVICE = """\
[Unit]
Description=Docker (the host daemon, through the bind-mounted /var/run/docker.sock)

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/test -S /var/run/docker.sock

[Install]
WantedBy=multi-user.target
"""

DOCKERD_STANDIN = "#!/bin/sh\necho 'test node: Docker is the host daemon (bind-mounted socket)' >&2\nexit 1\n"

# systemd as PID 1 in a container: /run and /run/lock on tmpfs, the (v1) cgroup tree read-only. Not
# --privileged: on this kind of host (dockerd itself in a container short of a capability) runc then fails
# with "unable to apply caps: operation not permitted", and systemd does not need it.
SYSTEMD_RUN_FLAGS = ["--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro"]


def _sh(*cmd: str, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def _wait_for_systemd(name: str, timeout: float = 60) -> str:
    """Until systemd answers `is-system-running` (running or degraded); its last answer otherwise."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        p = _sh("docker", "exec", name, "systemctl", "is-system-running", check=False, timeout=30)
        state = (p.stdout + p.stderr).strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    return state


def _write_image_context(ctx: Path) -> None:
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(NODE_DOCKERFILE)
    (ctx / "docker.service").write_text(DOCKER_SERVICE)
    (ctx / "dockerd").write_text(DOCKERD_STANDIN)
    (ctx / "dockerd").chmod(0o755)


def _build_wheel_and_wheelhouse(work: Path) -> Path:
    """The wheel of this checkout in work/dist, its dependencies' wheels in work/wheelhouse."""
    dist, wheelhouse, src = work / "dist", work / "wheelhouse", work / "src"
    copy_package_sources(src)  # a copy: building in the checkout would leave build/ and *.egg-info behind
    _sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src), timeout=180)
    (wheel,) = dist.glob("swe_rl-*.whl")
    # Binary wheels for the node's Python (the base image's Debian bookworm python3: 3.11).
    _sh(
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "-d",
        str(wheelhouse),
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        f"{wheel}[server]",
        timeout=180,
    )
    (wheelhouse / wheel.name).unlink(missing_ok=True)  # the script installs the wheel from dist/
    return wheel


def _node_logs(name: str) -> str:
    p = _sh(
        "docker", "exec", name, "journalctl", "-u", "swe-exec-server", "-n", "40", "--no-pager", check=False
    )
    return p.stdout + p.stderr


def test_setup_docker_node_runs_for_real_under_systemd(docker_client, base_image):
    tag = f"swe-rl/node-test:{secrets.token_hex(4)}"
    name = f"swe-rl-node-test-{secrets.token_hex(4)}"
    server_id = f"{TEST_ID_PREFIX}node-{secrets.token_hex(3)}"
    token = secrets.token_hex(16)
    work = Path(tempfile.mkdtemp(prefix="swe-rl-node-"))
    try:
        _write_image_context(work / "image")
        build = subprocess.Popen(
            ["docker", "build", "-q", "-t", tag, str(work / "image")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:  # the wheels while the image builds
            wheel = _build_wheel_and_wheelhouse(work)
        finally:
            build_out, _ = build.communicate(timeout=600)
        assert build.returncode == 0, build_out
        _sh(
            "docker",
            "run",
            "-d",
            "--name",
            name,
            *SYSTEMD_RUN_FLAGS,
            "--label",
            "swe-rl.test=1",
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-v",
            f"{ROOT / 'server'}:/node/server:ro",
            "-v",
            f"{work / 'dist'}:/node/dist:ro",
            "-v",
            f"{work / 'wheelhouse'}:/node/wheelhouse:ro",
            "-p",
            "127.0.0.1::5000",
            tag,
        )
        state = _wait_for_systemd(name)
        if state not in ("running", "degraded"):
            logs = _sh("docker", "logs", "--tail", "20", name, check=False)
            pytest.skip(
                f"systemd as PID 1 does not come up in a container here ({state!r}): "
                f"{(logs.stdout + logs.stderr).strip()[-400:]}"
            )
        setup = _sh(
            "docker",
            "exec",
            "-e",
            f"SWE_FLEET_PACKAGE=/node/dist/{wheel.name}",
            "-e",
            "SWE_EXEC_HOST=0.0.0.0",
            "-e",
            f"SWE_EXEC_TOKEN={token}",
            "-e",
            f"SWE_EXEC_SERVER_ID={server_id}",
            "-e",
            "SWE_EXEC_MAX_CONTAINERS=4",
            "-e",
            "PIP_NO_INDEX=1",
            "-e",
            "PIP_FIND_LINKS=/node/wheelhouse",
            name,
            "bash",
            "/node/server/setup_docker_node.sh",
            check=False,
            timeout=300,
        )
        assert setup.returncode == 0, setup.stdout + setup.stderr + _node_logs(name)
        assert "healthy:" in setup.stdout
        assert token not in setup.stdout + setup.stderr  # the token is never printed

        active = _sh("docker", "exec", name, "systemctl", "is-active", "swe-exec-server", check=False)
        assert active.stdout.strip() == "active", active.stdout + _node_logs(name)
        enabled = _sh("docker", "exec", name, "systemctl", "is-enabled", "swe-exec-server", check=False)
        assert enabled.stdout.strip() == "enabled"
        mode = _sh("docker", "exec", name, "stat", "-c", "%a", "/etc/swe-rl/exec-token").stdout.strip()
        assert mode == "600"

        port = _sh("docker", "port", name, "5000/tcp").stdout.strip().splitlines()[0].rsplit(":", 1)[1]
        url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
        health = httpx.get(f"{url}/healthz", headers=headers, timeout=30)
        assert health.status_code == 200 and health.json()["ok"], health.text
        assert (
            httpx.post(f"{url}/container/create", json={"image": BASE_IMAGE}, timeout=30).status_code == 401
        )

        created = httpx.post(
            f"{url}/container/create", json={"image": BASE_IMAGE}, headers=headers, timeout=120
        )
        assert created.status_code == 200, created.text
        cid = created.json()["container_id"]
        labels = docker_client.containers.get(cid).labels  # a host container, under this node's server id
        assert labels["swe-rl.exec-server"] == server_id
        ran = httpx.post(
            f"{url}/container/exec",
            json={"container_id": cid, "command": "echo node-$((6*7))"},
            headers=headers,
            timeout=120,
        )
        assert ran.status_code == 200 and ran.json()["output"].strip() == "node-42", ran.text
        gone = httpx.post(
            f"{url}/container/destroy", json={"container_id": cid}, headers=headers, timeout=120
        )
        assert gone.status_code == 200, gone.text
        assert not docker_client.containers.list(
            all=True, filters={"label": f"swe-rl.exec-server={server_id}"}
        )
    finally:
        _sh("docker", "rm", "-f", "-v", name, check=False, timeout=120)
        remove_containers_of(server_id)
        _sh("docker", "rmi", "-f", tag, check=False, timeout=120)
        shutil.rmtree(work, ignore_errors=True)
