"""Deployment files (shellcheck: tests/scripts/test_shellcheck.py): node set-up does what it says, the unit is sound."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT


def _dry_run(tmp_path, **env: str) -> str:
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "SWE_PREFIX": str(tmp_path / "opt"),
        "SWE_ETC": str(tmp_path / "etc"),
        "SWE_EXEC_TOKEN": "secret-token",
        **env,
    }
    p = subprocess.run(
        ["bash", str(ROOT / "server/setup_docker_node.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_setup_docker_node_dry_run_lists_every_step(tmp_path):
    out = _dry_run(tmp_path)
    assert f"python3 -m venv {tmp_path}/opt/venv" in out
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
