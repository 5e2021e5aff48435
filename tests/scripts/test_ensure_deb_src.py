"""scripts/ensure_deb_src.sh: deb-src lines beside the machine's deb lines, once (apt-get source fetches the
orig tarballs of the mined set's release-anchored rows). Real bash, grep and sed on a folder of apt sources
made here; apt-get is a stub that logs its calls."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/ensure_deb_src.sh"
DEB822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n"


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "apt-get").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/apt.log\n')
    (bin_dir / "apt-get").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SWE_APT_DIR": str(tmp_path / "apt")}
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=60
    )


def _updates(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_deb_src_lines_are_added_beside_both_formats_once(tmp_path):
    (tmp_path / "apt/sources.list.d").mkdir(parents=True)
    (tmp_path / "apt/sources.list.d/debian.sources").write_text(DEB822)
    (tmp_path / "apt/sources.list").write_text(
        "# a comment\ndeb http://mirror.example/debian bookworm main\n"
    )
    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    added = (tmp_path / "apt/sources.list.d/swe-rl-deb-src.sources").read_text()
    assert "Types: deb-src\n" in added and "URIs: http://mirror.example/debian" in added
    assert (tmp_path / "apt/sources.list.d/swe-rl-deb-src.list").read_text().strip() == (
        "deb-src http://mirror.example/debian bookworm main"
    )
    assert (
        tmp_path / "apt/sources.list.d/debian.sources"
    ).read_text() == DEB822  # the machine's own: untouched
    assert _updates(tmp_path) == ["update -qq"]
    again = _run(tmp_path)  # deb-src lines are there now: nothing more
    assert again.returncode == 0 and _updates(tmp_path) == ["update -qq"]


def test_no_deb_line_means_nothing_written_and_a_note(tmp_path):
    (tmp_path / "apt/sources.list.d").mkdir(parents=True)
    proc = _run(tmp_path)
    assert proc.returncode == 0 and "no deb line" in proc.stderr
    assert not list((tmp_path / "apt/sources.list.d").iterdir()) and _updates(tmp_path) == []
