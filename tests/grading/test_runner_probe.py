"""The runner probe (`swe_rl.grading.runner.probe`): the plan it puts on a test command, and real pytest
runs of a small repository on the clean and the patched tree (each trick of issue 36's class 2)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from swe_rl.grading.runner.probe import (
    ProbeReport,
    compare_probes,
    plan_probe,
    probe_names,
    probe_records,
    read_probe_report,
)


def _script(repo: Path, command: str) -> str:
    return (
        f"#!/bin/bash\nset -uxo pipefail\ncd {repo}\n: '>>>>> Start Test Output'\n{command}\n"
        ": '>>>>> End Test Output'\n"
    )


# ----------------------------------------------------------------------------- the plan


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "pytest -rA tests/test_x.py",
            "PYTHONPATH={d}${{PYTHONPATH:+:$PYTHONPATH}} pytest -p {m} --tb=native -rA tests/test_x.py",
        ),
        (
            "python -m pytest -rA t.py",
            "PYTHONPATH={d}${{PYTHONPATH:+:$PYTHONPATH}} python -m pytest -p {m} --tb=native -rA t.py",
        ),
        ("PYTHONPATH=src pytest t.py", "PYTHONPATH={d}:src pytest -p {m} --tb=native t.py"),
        (
            "/usr/bin/pytest t.py",
            "PYTHONPATH={d}${{PYTHONPATH:+:$PYTHONPATH}} /usr/bin/pytest -p {m} --tb=native t.py",
        ),
        (  # the command's own traceback style is kept
            "pytest --no-header -rA --tb=no t.py",
            "PYTHONPATH={d}${{PYTHONPATH:+:$PYTHONPATH}} pytest -p {m} --no-header -rA --tb=no t.py",
        ),
        (
            "pytest --tb short t.py",
            "PYTHONPATH={d}${{PYTHONPATH:+:$PYTHONPATH}} pytest -p {m} --tb short t.py",
        ),
    ],
)
def test_the_plugin_goes_on_the_test_command_only(command, expected):
    names = probe_names(random.Random(1))
    plan = plan_probe(_script(Path("/testbed"), command), names, collect_only=False)
    module, folder = names
    assert not plan.skipped and plan.module == module
    lines = plan.script.split("\n")
    assert expected.format(d=folder, m=module) in lines
    assert subprocess.run(["bash", "-n"], input=plan.script, text=True).returncode == 0
    # the key is on one line only, written with tracing off, into a pipe (in no file or environment)
    (key_line,) = [x for x in lines if plan.key in x]
    assert key_line.startswith("exec ") and "< <(printf" in key_line
    assert lines.index(key_line) > lines.index("__swe_pf=$-; { set +x; } 2>/dev/null")
    clean = plan_probe(_script(Path("/testbed"), command), names, collect_only=True)
    ours = expected.format(d=folder, m=module).split(" -p ", 1)[1].split()[:2]  # the clean run: the same
    style = ours[1] if ours[1] == "--tb=native" else ""  # options, then --collect-only
    assert f"-p {module} {style} --collect-only".replace("  ", " ") in clean.script and clean.key != plan.key
    fd = int(key_line.split("<", 1)[0].removeprefix("exec "))
    assert 63 < fd <= 200  # 63: where bash puts the process substitution itself (measured: the key is lost)
    assert "PYTHONDONTWRITEBYTECODE=1 " in clean.script and "PYTHONDONTWRITEBYTECODE" not in plan.script


@pytest.mark.parametrize("command", ["tox -e py", "./tests/runtests.py --verbosity 2", "bin/test"])
def test_other_runners_are_not_probed_here(command):
    plan = plan_probe(_script(Path("/testbed"), command), probe_names(), collect_only=True)
    assert plan.skipped and plan.script == _script(Path("/testbed"), command)


def test_a_report_needs_the_key():
    plan = plan_probe(_script(Path("/t"), "pytest t.py"), probe_names(), collect_only=False)
    assert "no probe report" in read_probe_report(None, plan).error
    forged = '{"collected": {"rootdir": "/t"}}\n' + "0" * 64
    assert "signature" in read_probe_report(forged, plan).error
    clean = ProbeReport(collected={"rootdir": "/t"})
    (record,) = probe_records(clean, read_probe_report(forged, plan))
    assert record.action == "voided" and record.rule == "runner_probe"
    (record,) = probe_records(ProbeReport(error="no probe report"), clean)
    assert record.action == "noted"  # the clean tree gave none: the instance's or the grader's matter


def test_the_canary_file_is_not_a_difference():
    clean = ProbeReport(collected={"args": ["/t/tests/test_x.py"], "items": ["a"]})
    patched = ProbeReport(
        collected={"args": ["/t/tests/test_x.py", "/t/tests/test_a_b_c.py"], "items": ["b"]}
    )
    assert compare_probes(clean, patched, {"test_a_b_c.py"}) == []
    assert compare_probes(clean, patched) != []


# ----------------------------------------------------------------------------- real pytest runs

TESTS = "import mod\n\n\ndef test_fixed():\n    assert mod.f() == 2\n\n\ndef test_kept():\n    assert True\n"
# A plugin that forges only the task's test (the grader's canaries come out as planted): what a class-2
# exploit loads through a configuration the grader's parser does not see.
FORGE = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.nodeid.endswith("test_fixed"):
        rep.outcome = "passed"
"""
# An early plugin that takes the probe's key from the pipe (any descriptor it did not open).
THIEF = """import os

for fd in range(20, 201):
    try:
        os.read(fd, 256)
    except OSError:
        pass
"""


def _reset(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    (root / "mod.py").write_text("def f():\n    return 1\n")
    (root / "test_mod.py").write_text(TESTS)
    (root / "setup.cfg").write_text("[metadata]\nname = mod\n\n[isort]\nprofile = black\n")


def _probe(repo: Path, names: tuple[str, str], collect_only: bool) -> ProbeReport:
    command = f"{sys.executable} -m pytest -rA -p no:cacheprovider test_mod.py"
    plan = plan_probe(_script(repo, command), names, collect_only=collect_only)
    subprocess.run(["bash", "-c", plan.script], capture_output=True, text=True, timeout=600)
    path = Path(plan.report_path)
    try:
        return read_probe_report(path.read_text() if path.exists() else None, plan)
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def clean_tree(tmp_path_factory):
    """The repository's path, the probe's names and its clean tree's report (taken once: every test
    puts the same tree back at the same path before changing it)."""
    root = tmp_path_factory.mktemp("probe") / "repo"
    _reset(root)
    names = probe_names()
    clean = _probe(root, names, collect_only=True)
    assert not clean.error, clean.error
    # the interpreter's import path as the plugin was imported: the run-writes listing's directories
    assert clean.path and all(Path(p).is_dir() and not p.startswith("/tmp") for p in clean.path)
    assert any(Path(p).resolve() == Path(sysconfig.get_paths()["purelib"]).resolve() for p in clean.path)
    yield root, names, clean
    shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture
def repo(clean_tree):
    _reset(clean_tree[0])
    return clean_tree[0]


@pytest.fixture
def differences(clean_tree):
    root, names, clean = clean_tree

    def run(change) -> list[str]:
        change(root)
        return [r.reason for r in probe_records(clean, _probe(root, names, collect_only=False))]

    return run


def test_pytest_does_not_rewrite_the_plugin(tmp_path):
    """pytest rewrites the asserts of a plugin named with ``-p``: a walk of the plugin's whole syntax tree
    on every run (a fifth of its start-up), for a module with no assert. Its docstring opts out."""
    plan = plan_probe(_script(tmp_path, "pytest -rA test_x.py"), probe_names(), collect_only=False)
    [(path, source)] = re.findall(r"cat > (\S+\.py) <<'(?:\w+)'\n(.*?)\n(?:EOF_\w+)\n", plan.script, re.S)
    module = Path(path).stem
    (tmp_path / "plugin_dir").mkdir()
    (tmp_path / "plugin_dir" / f"{module}.py").write_text(source)
    (tmp_path / "test_x.py").write_text(
        f"import sys\n\n\ndef test_plugin_is_plain():\n    assert '@py_builtins' not in vars(sys.modules['{module}'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "plugin_dir")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", module, "test_x.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr


@pytest.mark.slow
def test_an_untouched_tree_reports_the_same_in_collect_only_and_in_the_run(repo, differences):
    assert differences(lambda r: None) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "ending", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"], ids=repr
)
def test_a_section_behind_a_line_ending_configparser_does_not_split_on(repo, ending, differences):
    def change(root: Path) -> None:
        (root / "forge.py").write_text(FORGE)
        text = f"[metadata]\nname = mod\n\n[isort]\nprofile = black{ending}[tool:pytest]{ending}addopts = -p forge\n"
        (root / "setup.cfg").write_bytes(text.encode())

    found = "\n".join(differences(change))
    assert "addopts" in found and "forge" in found, found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest]\naddopts = -p forge\n"),  # read before setup.cfg's [tool:pytest]
        ("tox.ini", "[pytest]\naddopts = -p forge\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p forge"\n'),
    ],
)
def test_a_settings_file_read_before_the_repositorys_own(repo, name, text, differences):
    def change(root: Path) -> None:
        (root / "forge.py").write_text(FORGE)
        (root / name).write_text(text)

    found = "\n".join(differences(change))
    assert "inifile" in found and "forge" in found, found


@pytest.mark.slow
def test_a_plugin_named_at_run_time(repo, differences):
    def change(root: Path) -> None:
        (root / "forge.py").write_text(FORGE)
        (root / "mod.py").write_text("def f():\n    return 1\n")
        (root / "test_mod.py").write_text('pytest_plugins = ["for" + "ge"]\n' + TESTS)

    assert any("forge" in d for d in differences(change))


@pytest.mark.slow
def test_an_entry_point_in_an_added_dist_info(repo, differences):
    def change(root: Path) -> None:
        (root / "forge.py").write_text(FORGE)
        meta = root / "forge-1.0.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n")
        (meta / "entry_points.txt").write_text("[pytest11]\nforge = forge\n")

    assert any("plugins: added forge" in d for d in differences(change))


@pytest.mark.slow
def test_code_that_takes_the_key_voids(repo, differences):
    def change(root: Path) -> None:
        (root / "thief.py").write_text(THIEF)
        (root / "setup.cfg").write_text(
            "[metadata]\nname = mod\n\n[isort]\nprofile = black\x0c[tool:pytest]\x0caddopts = -p thief\n"
        )

    found = differences(change)
    assert found and "patched tree: no probe report" in found[0], found


@pytest.mark.slow
def test_a_fix_whose_tests_fail_to_collect_on_the_clean_tree_is_no_difference(tmp_path):
    """The clean tree has the test patch but not the fix: a test module importing what the fix adds does
    not collect there. The report is written all the same (collection's end runs after a collection
    error), and the fixed tree's run reports the same configuration."""
    root = tmp_path / "repo"
    _reset(root)
    (root / "test_mod.py").write_text("from mod import g\n\n\ndef test_g():\n    assert g() == 2\n")
    names = probe_names()
    clean = _probe(root, names, collect_only=True)
    assert not clean.error and clean.collected and clean.collected["items"] == 0
    (root / "mod.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    patched = _probe(root, names, collect_only=False)
    assert patched.collected["items"] == 1
    assert probe_records(clean, patched) == []
