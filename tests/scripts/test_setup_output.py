"""scripts/setup_machine.sh written to a log: plain lines (a progress bar's carriage-return frames reduced
to the last one), no needrestart chatter, apt told not to ask; the exit status kept.

Runs the real script in a copy of scripts/ whose steps are stand-ins that write what the real ones do
(a carriage-return bar on stdout and stderr, needrestart's lines), with a PATH of stand-in tools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # bash subprocesses

BAR_OUT = r"printf 'Sending build context 1MB\r2MB\r5.3MB\nStep 1/2 : FROM base\n'"
BAR_ERR = r"printf 'debootstrap 10%%\r55%%\r100%%\n' >&2"


def stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    copy = tmp_path / "checkout"
    (copy / "scripts/lib").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/setup_machine.sh", copy / "scripts")
    shutil.copy(ROOT / "scripts/lib/plain_lines.sh", copy / "scripts/lib")
    stub(copy / "scripts/ensure_docker.sh", BAR_OUT + "; exit ${ENSURE_RC:-0}")
    stub(copy / "scripts/install_package.sh", "echo '[setup] pip install -e .[eval]'")
    stub(copy / "scripts/ensure_deb_src.sh", "exit 0")
    stub(copy / "scripts/build_base_image.sh", BAR_ERR)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "awk", "env", "id", "dirname", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    for tool in ("dockerd", "debootstrap", "shellcheck", "git", "curl"):  # docker-registry is missing
        stub(bin_dir / tool, "exit 0")
    stub(
        bin_dir / "apt-get",
        f'echo "$* | $DEBIAN_FRONTEND $NEEDRESTART_MODE $NEEDRESTART_SUSPEND" >> {tmp_path}/apt.log\n'
        "printf 'Scanning processes...\\nScanning linux images...\\nNo services need to be restarted.\\n' >&2",
    )
    return copy


def run(checkout: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "checkout/scripts/setup_machine.sh"],  # a relative path, from elsewhere: it re-runs itself
        cwd=checkout.parent,
        env={"PATH": str(checkout.parent / "bin"), "HOME": str(checkout.parent), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_log_gets_plain_lines_and_apt_is_told_not_to_ask(checkout):
    p = run(checkout)
    assert p.returncode == 0, p.stderr
    assert "\r" not in p.stdout + p.stderr
    assert "5.3MB" in p.stdout and "Sending build context" not in p.stdout  # the bar's last frame only
    assert "Step 1/2 : FROM base" in p.stdout and "[setup] ready" in p.stdout
    assert "100%" in p.stderr and "55%" not in p.stderr
    assert "Scanning" not in p.stderr and "No services need" not in p.stderr
    calls = (checkout.parent / "apt.log").read_text().splitlines()
    assert calls == [
        "update -qq | noninteractive a 1",
        "install -y -qq docker-registry | noninteractive a 1",
    ]


def test_the_exit_status_survives_the_filter(checkout):
    p = run(checkout, ENSURE_RC="3")
    assert p.returncode == 3 and "\r" not in p.stdout and "[setup] ready" not in p.stdout
