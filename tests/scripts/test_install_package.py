"""scripts/install_package.sh (the install step of scripts/setup_machine.sh): installs a checkout once,
and installs a second checkout on the same machine instead of leaving the first one's package in place.

Each checkout is a copy of what the install needs; the interpreter is a throwaway venv that sees the
machine's site-packages (the dependencies, installed offline: no index, no build isolation).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.package_copy import copy_package_sources

pytestmark = pytest.mark.slow


def checkout(at: Path) -> Path:
    copy_package_sources(at)
    (at / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "install_package.sh", at / "scripts")
    return at


@pytest.fixture
def machine(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    venv = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    env.update(
        PYTHON=str(venv / "bin" / "python"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",  # pip reads this "no-" switch inverted: 0 turns isolation off
    )
    return env


def install(repo: Path, env: dict[str, str]) -> str:
    p = subprocess.run(
        ["bash", str(repo / "scripts" / "install_package.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def imported_from(env: dict[str, str]) -> Path:
    p = subprocess.run(
        [env["PYTHON"], "-c", "import swe_rl; print(swe_rl.__file__)"],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(p.stdout.strip()).resolve().parent.parent


def test_each_checkout_installs_itself_once(machine, tmp_path):
    first, second = checkout(tmp_path / "first"), checkout(tmp_path / "second")
    assert "pip install" in install(first, machine)
    assert imported_from(machine) == first.resolve()
    assert install(first, machine) == ""  # stamped, and the installed package is this checkout's

    # same pyproject.toml, another checkout: it installs itself
    assert "pip install" in install(second, machine)
    assert imported_from(machine) == second.resolve()

    # back in the first: its stamp is there, but the package is the second's: installed again
    out = install(first, machine)
    assert f"the one in {second.resolve()}" in out and "pip install" in out
    assert imported_from(machine) == first.resolve()
