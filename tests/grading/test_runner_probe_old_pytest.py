"""The runner probe on an old pytest (issue 48, item 6): pytest 4.6 under Python 3.7, as 7 of the 23 real
Verified instances run it (pytest 4.5-5.2 reads ``--co`` as ambiguous: ``--collect-only`` or
``--continue-on-collection-errors``; the clean tree's probe says ``--collect-only``). Python 3.7 has no
audit hooks, so the import check's fallback (the file read at the checkpoint) is the one exercised.

Needs a Python 3.7 (the machine's pyenv, or ``python3.7`` on the path) and pytest 4.6.11 from the package
registry; skipped, saying which, without them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_runner_guard import RUNTEST, TESTS, TXT_MODULE, TXT_PAYLOAD

from swe_rl.grading.runner.guard import imported_records
from swe_rl.grading.runner.probe import plan_probe, probe_names, probe_records, read_probe_report

pytestmark = pytest.mark.slow
OLD_PYTEST = "pytest==4.6.11"


def _python37() -> str | None:
    found = sorted(Path("/root/.pyenv/versions").glob("3.7.*/bin/python3.7"))
    return str(found[-1]) if found else shutil.which("python3.7")


@pytest.fixture(scope="module")
def old_python(tmp_path_factory):
    python = _python37()
    if python is None:
        pytest.skip("no Python 3.7 on this machine")
    venv = tmp_path_factory.mktemp("py37") / "venv"
    # Python 3.7's pip copies its CA bundle to a temp file and never removes it: its temp dir is ours.
    scratch = venv.parent / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300, env=env)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", OLD_PYTEST],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if pip.returncode != 0:
        pytest.skip(f"{OLD_PYTEST} could not be installed: {pip.stderr[-300:]}")
    yield str(venv / "bin" / "python")
    shutil.rmtree(venv.parent, ignore_errors=True)


def _run(python: str, repo: Path, names: tuple[str, str], collect_only: bool):
    command = f"{python} -m pytest -rA -p no:cacheprovider test_pkg.py"
    script = f"#!/bin/bash\ncd {repo}\n: '>>>>> Start Test Output'\n{command}\n: '>>>>> End Test Output'\n"
    plan = plan_probe(script, names, collect_only=collect_only)
    out = subprocess.run(["bash", "-c", plan.script], capture_output=True, text=True, timeout=600)
    path = Path(plan.report_path)
    try:
        return read_probe_report(path.read_text() if path.exists() else None, plan), out.stdout + out.stderr
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"pkg/__init__.py": "def f():\n    return 2\n"}, ""),
        ({"pkg/__init__.py": RUNTEST}, "Function.runtest"),
        ({"pkg/__init__.py": TXT_MODULE, "pkg/data.txt": TXT_PAYLOAD}, "deleted during the run"),
    ],
    ids=["gold", "runtest_by_name", "text_module_deleted"],
)
def test_the_probe_and_the_guard_on_pytest_4(old_python, tmp_path, patch, expected):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (repo / "test_pkg.py").write_text(TESTS)
    names = probe_names()
    clean, log = _run(old_python, repo, names, True)
    assert "pytest-4.6.11" in log and "ambiguous" not in log, log
    assert not clean.error and clean.collected["items"] and clean.finished, (clean.error, log)
    for rel, text in patch.items():
        (repo / rel).write_text(text)
    patched, log = _run(old_python, repo, names, False)
    imported, _ = imported_records(str(repo), patched.run)
    found = [f"{r.action}: {r.reason}" for r in [*probe_records(clean, patched), *imported]]
    if not expected:
        assert found == [] and "2 passed" in log, (found, log)
    else:
        assert any(expected in f and f.startswith("voided") for f in found), (found, log)
