"""A loopback registry that fails to start leaves nothing behind (no process, no temp dir)."""

from __future__ import annotations

import stat
import tempfile

import pytest

from swe_rl.testing import local_registry
from swe_rl.testing.local_registry import LocalRegistry


def test_a_registry_that_exits_at_once_leaves_no_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError, match="docker-registry exited"):
        LocalRegistry(binary="false")
    assert list(tmp_path.iterdir()) == []


def test_a_registry_that_never_answers_is_stopped_and_its_dir_removed(tmp_path, monkeypatch):
    """The start bound is the hang it rules out; shortened here so the test does not wait 30 s."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    silent = tmp_path / "silent-registry"
    silent.write_text("#!/bin/sh\nexec sleep 600\n")
    silent.chmod(silent.stat().st_mode | stat.S_IEXEC)
    started: list = []
    real_popen = local_registry.subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(local_registry.subprocess, "Popen", popen)
    with pytest.raises(TimeoutError):
        LocalRegistry(binary=str(silent), start_timeout=0.5)
    assert started and started[0].poll() is not None
    assert list((tmp_path / "tmp").iterdir()) == []
