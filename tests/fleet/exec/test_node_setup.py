"""server/setup_docker_node.sh, run unmodified on fresh machine-like nodes, as an operator runs it.

The dry-run tests (test_deploy.py) only list the steps; these run them on the two nodes an operator
meets (`node_machine.py`: containers booted like machines, systemd as PID 1, the node's own Docker):

- a node that already runs Docker (Debian's docker.io) and lacks python3-venv, as most Docker nodes do:
  the script installs python3-venv alone, the package, the token (from a file copied to the node, as
  with scp) and the unit, and the exec server creates, execs in and destroys a container of the
  node's own Docker;
- the same node updated: the script run again with a new wheel of the same version and nothing else
  serves the new code and keeps the token and every setting, with nothing duplicated;
- a node without Docker: the script installs Docker too, with the token on standard input, traced
  (strace): no process it starts gets the token as an argument or in its environment.

The node has no package index (pip reads a wheelhouse of the `server` extra, downloaded on the host and
mounted read-only); apt reaches Debian's mirror as on a real node. Nodes are removed whatever happens;
the node images are a cache (node_machine.py).
"""

from __future__ import annotations

import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BASE_IMAGE, ROOT, TEST_ID_PREFIX
from tests.fleet.exec.node_machine import Node, node_images, sh, sweep_dead_nodes
from tests.package_copy import copy_package_sources

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCRIPT = "/node/server/setup_docker_node.sh"
NODE_PIP = {
    "PIP_NO_INDEX": "1",
    "PIP_FIND_LINKS": "/node/work/wheelhouse",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}
UPDATE_VERSION = "0.1.0+node-update"


def _wheel(src: Path, dest: Path) -> Path:
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(src), timeout=300)
    (wheel,) = dest.glob("swe_rl-*.whl")
    return wheel


@pytest.fixture(scope="module")
def work(docker_client, base_image) -> Iterator[Path]:
    """A temp dir with the wheel of this checkout (dist/) and its `server` extra's wheels (wheelhouse/)."""
    sweep_dead_nodes()
    path = Path(tempfile.mkdtemp(prefix="swe-rl-node-"))
    try:
        wheel = _wheel(copy_package_sources(path / "src"), path / "dist")
        sh(
            sys.executable, "-m", "pip", "download", "-q", "-d", str(path / "wheelhouse"),
            "--only-binary=:all:", "--python-version", "3.11",  # the node's python3 (bookworm)
            f"{wheel}[server]", timeout=300,
        )  # fmt: skip
        (path / "wheelhouse" / wheel.name).unlink(missing_ok=True)  # the script installs the one it is given
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def images(work) -> dict[str, str]:
    return node_images(work / "images")


def _boot(image: str, work: Path) -> Node:
    return Node.boot(image, {ROOT / "server": "/node/server", work: "/node/work"})


def _setup(node: Node, *args: str, env: dict[str, str], under: tuple[str, ...] = (), **kw):
    """The script as an operator runs it (`under` a tracer, if given); its exit must be 0."""
    p = node.exec(*under, "bash", SCRIPT, *args, env={**NODE_PIP, **env}, timeout=1800, check=False, **kw)
    assert p.returncode == 0, p.stdout + p.stderr + node.journal()
    return p


def _url(node: Node) -> str:
    return f"http://127.0.0.1:{node.port()}"


def _check_serves_containers(node: Node, token: str, server_id: str) -> None:
    """Healthy, the token needed and accepted, one container of the node's own Docker created, used, gone."""
    url, headers = _url(node), {"Authorization": f"Bearer {token}"}
    health = httpx.get(f"{url}/healthz", timeout=60)
    assert health.status_code == 200 and health.json()["ok"] and health.json()["server_id"] == server_id
    assert httpx.get(f"{url}/status", timeout=60).status_code == 401
    assert (
        httpx.get(f"{url}/status", headers={"Authorization": "Bearer wrong"}, timeout=60).status_code == 401
    )
    assert httpx.get(f"{url}/status", headers=headers, timeout=60).status_code == 200

    node.load_image(BASE_IMAGE)
    created = httpx.post(f"{url}/container/create", json={"image": BASE_IMAGE}, headers=headers, timeout=300)
    assert created.status_code == 200, created.text + node.journal()
    cid = created.json()["container_id"]
    inner = node.exec("docker", "ps", "-q", "--no-trunc", "--filter", f"label=swe-rl.exec-server={server_id}")
    assert cid in inner.stdout  # a container of the node's Docker, not the host's
    ran = httpx.post(
        f"{url}/container/exec",
        json={"container_id": cid, "command": "echo node-$((6*7))"},
        headers=headers,
        timeout=300,
    )
    assert ran.status_code == 200 and ran.json()["output"].strip() == "node-42", ran.text
    gone = httpx.post(f"{url}/container/destroy", json={"container_id": cid}, headers=headers, timeout=300)
    assert gone.status_code == 200, gone.text
    assert not node.exec(
        "docker", "ps", "-aq", "--filter", f"label=swe-rl.exec-server={server_id}"
    ).stdout.strip()


def _settings(node: Node) -> list[str]:
    return node.exec("cat", "/etc/swe-rl/exec-server.env").stdout.splitlines()


@pytest.fixture(scope="module")
def docker_node(images, work) -> Iterator[Node]:
    node = _boot(images["docker"], work)
    try:
        yield node
    finally:
        node.remove()


@pytest.fixture(scope="module")
def installed(docker_node, work) -> dict[str, str]:
    """The first install on the node that runs Docker: the token from a file copied there (as with scp)."""
    token = secrets.token_hex(32)
    server_id = f"{TEST_ID_PREFIX}node-a"
    # Preconditions that hid the old bug: dockerd runs, python3-venv is missing.
    assert docker_node.exec("systemctl", "is-active", "docker", check=False).stdout.strip() == "active"
    assert docker_node.exec("python3", "-c", "import ensurepip", check=False).returncode != 0
    local = work / "exec-token"
    local.write_text(token + "\n")
    local.chmod(0o600)
    sh("docker", "cp", str(local), f"{docker_node.name}:/root/exec-token")
    local.unlink()
    env = {
        "SWE_FLEET_PACKAGE": f"/node/work/dist/{next((work / 'dist').glob('*.whl')).name}",
        "SWE_EXEC_HOST": "0.0.0.0",
        "SWE_EXEC_SERVER_ID": server_id,
        "SWE_EXEC_MAX_CONTAINERS": "4",
    }
    p = _setup(docker_node, "--token-file", "/root/exec-token", env=env)
    return {"token": token, "server_id": server_id, "out": p.stdout + p.stderr}


def test_setup_on_a_node_that_already_runs_docker(docker_node, installed):
    out, token = installed["out"], installed["token"]
    assert "installing python3-venv" in out and "docker.io" not in out  # only what was missing
    assert "healthy, token accepted" in out
    assert token not in out
    assert docker_node.exec("systemctl", "is-enabled", "swe-exec-server").stdout.strip() == "enabled"
    assert (
        docker_node.exec("stat", "-c", "%a %U %G", "/etc/swe-rl/exec-token").stdout.strip()
        == "640 root swe-exec"
    )
    # Least privilege: the server runs as its own system user (not root), in the docker group, sandboxed.
    pid = docker_node.exec("systemctl", "show", "-p", "MainPID", "--value", "swe-exec-server").stdout.strip()
    assert docker_node.exec("stat", "-c", "%U", f"/proc/{pid}").stdout.strip() == "swe-exec"
    status = docker_node.exec("cat", f"/proc/{pid}/status").stdout
    assert "\nUid:\t0\t" not in status and "NoNewPrivs:\t1" in status, status
    docker_gid = docker_node.exec("getent", "group", "docker").stdout.split(":")[2]
    groups = next(line for line in status.splitlines() if line.startswith("Groups:")).split()[1:]
    assert docker_gid in groups, status  # the unit's SupplementaryGroups: the Docker socket's group
    assert docker_node.exec("cat", "/etc/swe-rl/exec-token").stdout.strip() == token
    settings = _settings(docker_node)
    assert "SWE_EXEC_HOST=0.0.0.0" in settings and "SWE_EXEC_TOKEN_FILE=/etc/swe-rl/exec-token" in settings
    assert token not in "\n".join(settings)
    _check_serves_containers(docker_node, token, installed["server_id"])


def test_running_it_again_updates_the_node_and_keeps_token_and_settings(docker_node, installed, work):
    """A new wheel of the same version and nothing else given: new code served, token and settings kept;
    and the update drops no rollout: a command running on a container when it starts finishes with its
    answer, and the container is served by the new process (issue 50, item 5)."""
    src = copy_package_sources(work / "src-update")
    app = src / "swe_rl/fleet/exec/app.py"
    app.write_text(app.read_text().replace('__version__ = "0.1.0"', f'__version__ = "{UPDATE_VERSION}"', 1))
    wheel = _wheel(src, work / "update")
    before = _settings(docker_node)
    pid = docker_node.exec("systemctl", "show", "-p", "MainPID", "--value", "swe-exec-server").stdout
    url, headers = _url(docker_node), {"Authorization": f"Bearer {installed['token']}"}
    cid, episode, answer = _start_an_episode(docker_node, url, headers)

    updates: list = []
    update = threading.Thread(
        target=lambda: updates.append(
            _setup(docker_node, env={"SWE_FLEET_PACKAGE": f"/node/work/update/{wheel.name}"})
        )
    )
    update.start()
    try:
        _wait_until_draining(url)  # the update's restart: the old process waits for the running command
    finally:
        docker_node.exec("docker", "exec", cid, "touch", "/tmp/go")  # the episode's command may end now
        episode.join(UPDATE_BOUND)
        update.join(UPDATE_BOUND)
    assert answer.get("returncode") == 0 and answer["output"].strip() == "finished", answer
    (p,) = updates
    out = p.stdout + p.stderr
    assert "keeping the token" in out and "installing python3-venv" not in out
    health = httpx.get(f"{_url(docker_node)}/healthz", timeout=60).json()
    assert health["version"] == UPDATE_VERSION, health  # the new wheel installed and the service restarted
    assert docker_node.exec("systemctl", "show", "-p", "MainPID", "--value", "swe-exec-server").stdout != pid
    assert docker_node.exec("cat", "/etc/swe-rl/exec-token").stdout.strip() == installed["token"]
    after = _settings(docker_node)
    assert after == before  # host, server id, capacity: as the first run left them, each once
    assert len({line.split("=")[0] for line in after}) == len(after)
    servers = docker_node.exec("pgrep", "-c", "-f", "swe-exec-server", check=False).stdout.strip()
    assert servers == "1"
    units = docker_node.exec("systemctl", "list-unit-files", "--no-legend", "swe-exec-server*").stdout
    assert len(units.strip().splitlines()) == 1
    status = httpx.get(
        f"{_url(docker_node)}/status", headers={"Authorization": f"Bearer {installed['token']}"}, timeout=60
    )
    assert status.status_code == 200 and status.json()["capacity"] == 4
    # the episode's container, kept through the restart, is served by the new process
    again = httpx.post(
        f"{url}/container/exec",
        json={"container_id": cid, "command": "echo adopted"},
        headers=headers,
        timeout=300,
    )
    assert again.status_code == 200 and again.json()["output"].strip() == "adopted", again.text
    gone = httpx.post(f"{url}/container/destroy", json={"container_id": cid}, headers=headers, timeout=300)
    assert gone.status_code == 200, gone.text


UPDATE_BOUND = 900.0  # only a hang reaches it


def _start_an_episode(node: Node, url: str, headers: dict[str, str]) -> tuple[str, threading.Thread, dict]:
    """A container and a command running on it that ends only once /tmp/go exists (its answer lands in
    the returned dict when the thread ends)."""
    node.load_image(BASE_IMAGE)
    created = httpx.post(f"{url}/container/create", json={"image": BASE_IMAGE}, headers=headers, timeout=300)
    assert created.status_code == 200, created.text + node.journal()
    cid = created.json()["container_id"]
    answer: dict = {}
    command = "touch /tmp/started; while [ ! -f /tmp/go ]; do sleep 0.2; done; echo finished"
    call = {"container_id": cid, "command": command, "timeout": 800}
    episode = threading.Thread(
        target=lambda: answer.update(
            httpx.post(f"{url}/container/exec", json=call, headers=headers, timeout=UPDATE_BOUND).json()
        )
    )
    episode.start()
    probe = {"container_id": cid, "command": "test -f /tmp/started", "timeout": 60}
    while httpx.post(f"{url}/container/exec", json=probe, headers=headers, timeout=300).json()["returncode"]:
        time.sleep(0.2)  # until the long command runs
    return cid, episode, answer


def _wait_until_draining(url: str) -> None:
    deadline = time.monotonic() + UPDATE_BOUND
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=60).json().get("draining"):
                return
        except (httpx.HTTPError, ValueError):
            pass  # not answering for a moment
        time.sleep(0.5)
    raise AssertionError("the update never drained the node")


def test_setup_on_a_node_without_docker_installs_it_token_never_an_argument(images, work):
    token = secrets.token_hex(32)
    server_id = f"{TEST_ID_PREFIX}node-b"
    node = _boot(images["bare"], work)
    try:
        assert node.exec("sh", "-c", "command -v dockerd", check=False).returncode != 0
        wheel = next((work / "dist").glob("*.whl")).name
        env = {"SWE_FLEET_PACKAGE": f"/node/work/dist/{wheel}", "SWE_EXEC_HOST": "0.0.0.0"}
        env["SWE_EXEC_SERVER_ID"] = server_id
        # Every exec of the set-up and its children, with arguments and environment (-v), to a file.
        strace = (
            "strace",
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-e",
            "trace=execve",
            "-v",
            "-s",
            "4096",
            "-o",
            "/tmp/execs",
        )
        p = _setup(node, "--token-stdin", env=env, under=strace, input=token + "\n")
        out = p.stdout + p.stderr
        assert "installing docker.io python3-venv" in out and "healthy, token accepted" in out
        assert token not in out
        execs = node.exec("cat", "/tmp/execs").stdout
        assert "apt-get" in execs and "/opt/swe-rl/venv/bin/pip" in execs and "systemctl" in execs
        assert token not in execs  # in no argument and no environment of any process it started
        assert node.exec("systemctl", "is-active", "docker").stdout.strip() == "active"
        assert node.exec("cat", "/etc/swe-rl/exec-token").stdout.strip() == token
        _check_serves_containers(node, token, server_id)
    finally:
        node.remove()


def test_node_image_recipe_is_as_an_operator_finds_a_node():
    """The node images carry no python3-venv (a node image with it hid the bug this test exists for)."""
    from tests.fleet.exec import node_machine

    for recipe in (node_machine.BARE_DOCKERFILE, node_machine.DOCKER_DOCKERFILE):
        assert "venv" not in recipe
