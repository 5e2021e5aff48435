"""Deployment files: shell scripts are shellcheck-clean, node set-up does what it says, the unit is sound."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), *ROOT.glob("server/*.sh"), *ROOT.glob("eval/*.sh"),
                  *ROOT.glob("data/*.sh"), ROOT / ".ci/run"])


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck_clean(script):
    p = subprocess.run(["shellcheck", "-x", str(script)], capture_output=True, text=True, cwd=script.parent)
    assert p.returncode == 0, p.stdout + p.stderr


def test_setup_docker_node_dry_run_lists_every_step(tmp_path):
    env = {**os.environ, "DRY_RUN": "1", "SWE_PREFIX": str(tmp_path / "opt"), "SWE_ETC": str(tmp_path / "etc"),
           "SWE_EXEC_TOKEN": "secret-token"}
    p = subprocess.run(["bash", str(ROOT / "server/setup_docker_node.sh")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert f"python3 -m venv {tmp_path}/opt/venv" in out
    assert "flask>=3.0 waitress>=3.0 docker>=7.0" in out
    assert f"install -m 0755 {ROOT}/server/exec_server.py {tmp_path}/opt/exec_server.py" in out
    assert f"install -m 0644 {ROOT}/server/request_checks.py {tmp_path}/opt/request_checks.py" in out
    assert "swe-exec-server.service /etc/systemd/system/swe-exec-server.service" in out
    assert "systemctl restart swe-exec-server" in out
    assert "secret-token" not in out  # the token is never printed
    assert not (tmp_path / "etc").exists()  # a dry run writes nothing


def test_systemd_unit_runs_the_installed_server_with_its_env_file():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(ROOT / "server/swe-exec-server.service")
    assert unit["Unit"]["Requires"] == "docker.service"
    svc = unit["Service"]
    assert svc["ExecStart"] == "/opt/swe-rl/venv/bin/python /opt/swe-rl/exec_server.py"
    assert svc["EnvironmentFile"] == "/etc/swe-rl/exec-server.env"
    assert svc["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_exec_server_deploys_alone():
    """The exec server imports nothing of swe_rl (it is copied alone onto Docker nodes)."""
    for name in ("exec_server.py", "pool_server.py", "request_checks.py"):
        src = (ROOT / "server" / name).read_text()
        assert "from swe_rl" not in src and "import swe_rl" not in src
