"""Deployment files (shellcheck: tests/scripts/test_shellcheck.py): node set-up does what it says, the unit is sound."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT


def _script(tmp_path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWE_EXEC_")},
        "DRY_RUN": "1",
        "SWE_PREFIX": str(tmp_path / "opt"),
        "SWE_ETC": str(tmp_path / "etc"),
        **env,
    }
    return subprocess.run(
        ["bash", str(ROOT / "server/setup_docker_node.sh"), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _dry_run(tmp_path, *args: str, stdin: str | None = None, **env: str) -> str:
    p = _script(tmp_path, *args, stdin=stdin, **{"SWE_EXEC_TOKEN": "secret-token", **env})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_setup_docker_node_dry_run_lists_every_step(tmp_path):
    out = _dry_run(tmp_path)
    assert f"python3 -m venv --clear {tmp_path}/opt/venv" in out
    assert (
        f"{tmp_path}/opt/venv/bin/pip install -q --upgrade {ROOT}[server]" in out
    )  # the repository by default
    assert "swe-exec-server.service /etc/systemd/system/swe-exec-server.service" in out
    assert "systemctl restart swe-exec-server" in out
    assert "secret-token" not in out  # the token is never printed
    assert not (tmp_path / "etc").exists()  # a dry run writes nothing


def test_setup_docker_node_installs_the_package_it_is_given(tmp_path):
    out = _dry_run(tmp_path, SWE_FLEET_PACKAGE="/root/swe_rl-0.1.0-py3-none-any.whl")
    assert "pip install -q --upgrade /root/swe_rl-0.1.0-py3-none-any.whl[server]" in out
    # a wheel of the version already installed replaces it (pip alone would call it satisfied)
    assert "pip install -q --no-deps --force-reinstall /root/swe_rl-0.1.0-py3-none-any.whl" in out


def test_setup_docker_node_help_starts_with_its_usage(tmp_path):
    p = _script(tmp_path, "--help")
    assert p.returncode == 0
    assert p.stdout.startswith("Install or update the swe-rl exec server")
    assert "Usage: setup_docker_node.sh [--token-stdin | --token-file PATH]" in p.stdout
    assert "--token-stdin' < exec-token" in p.stdout  # the documented way keeps the token off command lines


def test_setup_docker_node_takes_the_token_from_stdin_or_a_file(tmp_path):
    out = _dry_run(tmp_path, "--token-stdin", stdin="tok-from-stdin-0123\n", SWE_EXEC_TOKEN="")
    assert "token from stdin written to" in out and "tok-from-stdin-0123" not in out
    (tmp_path / "tok").write_text("tok-from-file-0123\n")
    out = _dry_run(tmp_path, "--token-file", str(tmp_path / "tok"), SWE_EXEC_TOKEN="")
    assert "token from file written to" in out and "tok-from-file-0123" not in out
    out = _dry_run(tmp_path, SWE_EXEC_TOKEN="")
    assert "no token given: generating one" in out


@pytest.mark.parametrize(
    ("args", "stdin", "env", "message"),
    [
        (["--token-stdin"], "", {}, "--token-stdin: nothing on standard input"),
        (["--token-stdin"], "two words\n", {}, "the token given (stdin) holds whitespace"),
        (["--token-stdin"], "tok\n", {"SWE_EXEC_TOKEN": "other"}, "give it one way"),
        (["--token-stdin", "--token-file", "/x"], "tok\n", {}, "give the token one way"),
        (["--token-file", "/nonexistent/tok"], None, {}, "--token-file: cannot read /nonexistent/tok"),
        (["--token-file"], None, {}, "--token-file needs a path"),
        (["--token"], None, {}, "unknown argument: --token"),
        ([], None, {"SWE_EXEC_PORT": "1\n2"}, "SWE_EXEC_PORT holds a newline"),
    ],
)
def test_setup_docker_node_refuses_a_bad_token_or_argument(tmp_path, args, stdin, env, message):
    p = _script(tmp_path, *args, stdin=stdin, **env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr
    assert not (tmp_path / "etc").exists()  # nothing half-done


def test_setup_docker_node_keeps_the_last_runs_settings(tmp_path):
    """A re-run writes what it is given over the last run's file, which keeps the rest (hand-added too)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "exec-server.env").write_text(
        "# written by an earlier run\nSWE_EXEC_HOST=0.0.0.0\nSWE_EXEC_PORT=5000\nSWE_EXEC_SERVER_ID=node-7\n"
        "SWE_EXEC_MAX_WARM=2\nSWE_EXEC_TOKEN=in-the-wrong-place\n"
    )
    out = _dry_run(tmp_path, SWE_EXEC_PORT="6000", SWE_EXEC_ALLOW_PULL="1")
    settings = [line.removeprefix("+   ") for line in out.splitlines() if line.startswith("+   ")]
    assert settings == [
        "SWE_EXEC_ALLOW_PULL=1",
        "SWE_EXEC_CPUS=2",
        "SWE_EXEC_HOST=0.0.0.0",
        "SWE_EXEC_MAX_CONTAINERS=32",
        "SWE_EXEC_MAX_WARM=2",
        "SWE_EXEC_MEMORY=4g",
        "SWE_EXEC_PIDS_LIMIT=1024",
        "SWE_EXEC_PORT=6000",
        "SWE_EXEC_SERVER_ID=node-7",
        f"SWE_EXEC_TOKEN_FILE={etc}/exec-token",
    ]
    assert "dropping SWE_EXEC_TOKEN from" in out and "in-the-wrong-place" not in out


def test_console_scripts_point_at_the_fleet_mains():
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["swe-exec-server"] == "swe_rl.fleet.exec.app:main"
    assert scripts["swe-local-fleet"] == "swe_rl.fleet.local:main"


def test_systemd_unit_runs_the_installed_server_with_its_env_file():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(ROOT / "server/swe-exec-server.service")
    assert unit["Unit"]["Requires"] == "docker.service"
    svc = unit["Service"]
    assert svc["ExecStart"] == "/opt/swe-rl/venv/bin/swe-exec-server"
    assert svc["EnvironmentFile"] == "/etc/swe-rl/exec-server.env"
    assert svc["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    """The unit as systemd reads it; the console script it runs is stood in for under tmp_path."""
    stub = tmp_path / "opt/swe-rl/venv/bin/swe-exec-server"
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    text = (ROOT / "server/swe-exec-server.service").read_text()
    assert "ExecStart=/opt/swe-rl/venv/bin/swe-exec-server\n" in text
    unit = tmp_path / "swe-exec-server.service"
    unit.write_text(text.replace("ExecStart=/opt/", f"ExecStart={tmp_path}/opt/"))
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_setup_docker_node_installs_each_missing_dependency_on_its_own(tmp_path):
    """A node that runs Docker but lacks python3-venv gets python3-venv (and only it); one without both, both."""
    shims = tmp_path / "bin"
    shims.mkdir()
    real_python = shutil.which("python3")
    assert real_python
    (shims / "python3").write_text(
        f'#!/bin/sh\n[ "$2" = "import ensurepip" ] && exit 1\nexec {real_python} "$@"\n'
    )  # the python3 of a node without python3-venv
    (shims / "dockerd").write_text("#!/bin/sh\n")
    for shim in shims.iterdir():
        shim.chmod(0o755)
    for tool in ("bash", "dirname", "id", "sed", "sort", "apt-get"):  # nothing else: not the host's dockerd
        found = shutil.which(tool)
        assert found, tool
        (shims / tool).symlink_to(found)
    path = str(shims)
    out = _dry_run(tmp_path, PATH=path)
    assert "installing python3-venv\n" in out and "docker.io" not in out
    assert "apt-get install -y -qq --no-install-recommends python3-venv\n" in out

    (shims / "dockerd").unlink()
    out = _dry_run(tmp_path, PATH=path)
    assert "installing docker.io python3-venv\n" in out


def test_systemd_unit_runs_with_least_privilege():
    """Not root: a system user in the docker group (its one privilege), sandboxed, one capability (kill)."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(ROOT / "server/swe-exec-server.service")
    svc = unit["Service"]
    assert svc.get("User") == "swe-exec" and svc.get("Group") == "swe-exec"
    assert svc["User"] not in ("root", "0") and "DynamicUser" not in svc
    assert svc["SupplementaryGroups"].split() == ["docker"]
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "CAP_KILL",
        "AmbientCapabilities": "CAP_KILL",
        "StateDirectory": "swe-exec-server",
    }
    assert {k: svc.get(k) for k in expected} == expected
    # What it writes lives in its state directory, the one writable path under ProtectSystem=strict.
    text = (ROOT / "server/swe-exec-server.service").read_text()
    settings = [
        line.removeprefix("Environment=") for line in text.splitlines() if line.startswith("Environment=")
    ]
    env = dict(line.split("=", 1) for line in settings)
    for var in ("SWE_EXEC_STATE_DIR", "SWE_EXEC_SNAPSHOT_DIR"):
        assert env[var].startswith("/var/lib/swe-exec-server/"), env
    # The settings file is read after those defaults (it may move them).
    assert text.index("Environment=SWE_EXEC_SNAPSHOT_DIR") < text.index("EnvironmentFile=")


def test_setup_docker_node_makes_the_service_user_and_shares_the_token_with_it_only(tmp_path):
    out = _dry_run(tmp_path)
    if subprocess.run(["id", "-u", "swe-exec"], capture_output=True).returncode != 0:
        assert "useradd --system --user-group --home-dir /var/lib/swe-exec-server" in out
    text = (ROOT / "server/setup_docker_node.sh").read_text()
    assert 'chown "root:$service_user" "$token_file" && chmod 0640 "$token_file"' in text
    assert "SWE_EXEC_TLS_CERT" not in out  # no TLS unless given


def test_setup_docker_node_installs_a_tls_certificate_and_key(tmp_path):
    (tmp_path / "c.pem").write_text("cert")
    (tmp_path / "k.pem").write_text("key")
    out = _dry_run(tmp_path, "--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem"))
    etc = tmp_path / "etc"
    assert f"install -m 0644 {tmp_path}/c.pem {etc}/tls/exec.crt" in out
    assert f"install -m 0640 -o root -g swe-exec {tmp_path}/k.pem {etc}/tls/exec.key" in out
    assert (
        f"+   SWE_EXEC_TLS_CERT={etc}/tls/exec.crt" in out
        and f"+   SWE_EXEC_TLS_KEY={etc}/tls/exec.key" in out
    )
    p = _script(tmp_path, "--tls-cert", str(tmp_path / "c.pem"), SWE_EXEC_TOKEN="t")
    assert p.returncode == 2 and "give --tls-cert and --tls-key together" in p.stderr
    p = _script(tmp_path, "--tls-key", "/nonexistent/k.pem", SWE_EXEC_TOKEN="t")
    assert p.returncode == 2 and "--tls-key: cannot read /nonexistent/k.pem" in p.stderr
