"""swe_rl.grading.integrity and swe_rl.grading.patch.split without Docker: what is dropped, trimmed, flagged, kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swe_rl.grading.integrity import IntegrityConfig, neutralise, patch_paths, section_files, strict_report
from swe_rl.grading.patch.split import join_patch, split_patch

TEST_PATCH = (
    "diff --git a/pkg/tests/test_mod.py b/pkg/tests/test_mod.py\n--- a/pkg/tests/test_mod.py\n+++ "
    "b/pkg/tests/test_mod.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
)
GOLD = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
)


def new_file(path: str, text: str) -> str:
    lines = text.split("\n")
    body = "".join(f"+{x}\n" for x in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def git_diff(tmp_path: Path, before: dict[str, str], after: dict[str, str | None]) -> str:
    """A real `git diff` between two trees (as the exec server makes it)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True)  # noqa: E731
    run("init", "-q")
    for path, text in before.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for path, text in after.items():
        if text is None:
            (repo / path).unlink()
        else:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
    run("add", "-A")
    return run("diff", "--cached", "--binary", "HEAD").stdout


def kept_and_rules(patch: str, **kw) -> tuple[list[str], list[tuple[str, str, str]]]:
    kw.setdefault("test_patch", TEST_PATCH)
    kw.setdefault("gold_patch", GOLD)
    out, report = neutralise(patch, **kw)
    return patch_paths(out), [(r.path, r.rule, r.action) for r in report.records]


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("conftest.py", "conftest"),
        ("deep/er/conftest.py", "conftest"),
        ("pytest.ini", "pytest_settings"),
        (".pytest.ini", "pytest_settings"),
        ("tox.ini", "pytest_settings"),
        ("sitecustomize.py", "interpreter_hook"),
        ("src/usercustomize.py", "interpreter_hook"),
        ("x.pth", "path_file"),
        ("pkg.egg-info/entry_points.txt", "package_metadata"),
        ("pytest.py", "runner_shadow"),
        ("_pytest/runner.py", "runner_shadow"),
        ("src/pluggy/__init__.py", "runner_shadow"),
        ("test_new.py", "test_file"),
        ("pkg/other_test.py", "test_file"),
        ("tests/helpers.py", "test_dir"),
        ("pkg/tests/data.json", "test_dir"),
        ("pkg/tests/test_mod.py", "test_patch_file"),
    ],
)
def test_infrastructure_files_are_dropped(path, rule):
    kept, records = kept_and_rules(GOLD + new_file(path, "x = 1"))
    assert kept == ["pkg/mod.py"]
    assert records == [(path, rule, "dropped")]


def test_source_changes_are_kept_untouched(tmp_path):
    patch = git_diff(
        tmp_path,
        {"pkg/mod.py": "a = 1\n", "README": "hi\n"},
        {"pkg/mod.py": "a = 2\n", "README": "ho\n", "pkg/new.py": "b = 1\n"},
    )
    out, report = neutralise(patch, test_patch=TEST_PATCH)
    assert out == patch and not report.records and report.kept_bytes == report.patch_bytes


def test_gold_touched_test_dir_file_is_the_fix_and_kept():
    gold = GOLD + new_file("tests/util.py", "u = 1")
    kept, records = kept_and_rules(new_file("tests/util.py", "u = 2"), gold_patch=gold)
    assert kept == ["tests/util.py"] and not records


def test_eval_script_files_are_dropped():
    kept, records = kept_and_rules(
        new_file("bin/test", "echo ok"), eval_script="cd /testbed\n./bin/test -C x\n"
    )
    assert records == [("bin/test", "eval_script_file", "dropped")] and kept == []


def test_deleting_and_renaming_tests_is_dropped(tmp_path):
    patch = git_diff(
        tmp_path,
        {"pkg/tests/test_mod.py": "x = 1\n" * 20, "pkg/mod.py": "a = 1\n"},
        {"pkg/tests/test_mod.py": None, "pkg/tested.py": "x = 1\n" * 20, "pkg/mod.py": "a = 2\n"},
    )
    kept, records = kept_and_rules(patch)
    assert kept == ["pkg/mod.py"]
    assert [r[1] for r in records] == ["test_patch_file"]


SETUP_CFG = "[metadata]\nname = pkg\n\n[tool:pytest]\naddopts = -ra\n\n[flake8]\nmax-line-length = 99\n"


def test_setup_cfg_pytest_lines_are_trimmed_others_kept(tmp_path):
    after = SETUP_CFG.replace("name = pkg", "name = pkg2").replace("-ra", "-ra -p evil").replace("99", "120")
    after += "\n[tool:pytest]\npython_files = *.py\n"
    patch = git_diff(tmp_path, {"setup.cfg": SETUP_CFG}, {"setup.cfg": after})
    out, report = neutralise(patch, originals={"setup.cfg": SETUP_CFG})
    assert [r.action for r in report.records] and {r.rule for r in report.records} == {"test_config_lines"}
    repo = tmp_path / "repo"
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    subprocess.run(["git", "reset", "-q", "--hard"], cwd=repo, check=True)
    applied = subprocess.run(["git", "apply", "-"], cwd=repo, input=out, text=True, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    text = (repo / "setup.cfg").read_text()
    assert "name = pkg2" in text and "max-line-length = 120" in text
    assert "evil" not in text and "python_files" not in text and "addopts = -ra\n" in text


def test_pyproject_section_and_pytest_mentions_are_trimmed(tmp_path):
    before = '[project]\nname = "pkg"\ndependencies = []\n'
    after = (
        before.replace("[]", '["attrs"]') + '\n[tool.pytest.ini_options]\naddopts = "-p evil"\n'
        '\n[project.entry-points.pytest11]\nevil = "evil"\n'
    )
    patch = git_diff(tmp_path, {"pyproject.toml": before}, {"pyproject.toml": after})
    out, report = neutralise(patch, originals={"pyproject.toml": before})
    assert '"attrs"' in out and "evil" not in out and "ini_options" not in out
    assert report.records[0].action == "trimmed"


def test_settings_file_with_unknown_base_is_trimmed_conservatively(tmp_path):
    cfg = SETUP_CFG + "".join(f"key{i} = {i}\n" for i in range(8))
    patch = git_diff(tmp_path, {"setup.cfg": cfg}, {"setup.cfg": cfg.replace("key7 = 7", "key7 = 8")})
    out, report = neutralise(patch, originals={})  # no section header in the hunk's context: unknown
    assert out == "" and "unknown" in report.records[0].reason
    out, report = neutralise(patch, originals={"setup.cfg": cfg})
    assert out == patch and not report.records


def test_new_setup_cfg_keeps_non_pytest_sections():
    out, report = neutralise(new_file("setup.cfg", "[flake8]\nmax = 1\n[tool:pytest]\naddopts = -p evil"))
    assert "[flake8]" in out and "evil" not in out and "+1,2 @@" in out


def test_setup_py_pytest_plugin_is_dropped():
    kept, records = kept_and_rules(new_file("setup.py", "setup(entry_points={'pytest11': ['e = evil']})"))
    assert records == [("setup.py", "setup_py_plugin", "dropped")]


@pytest.mark.parametrize(
    "line",
    [
        "import _pytest.reports",
        "pytest.skip('no')",
        "def pytest_runtest_makereport(item, call):",
        "os.environ['PYTEST_ADDOPTS'] = '-p x'",
        "print('PASSED ' + t)",
        "os._exit(0)",
    ],
)
def test_source_reaching_into_the_runner_is_flagged(line):
    out, report = neutralise(GOLD.replace("+a = 2", f"+{line}"))
    assert patch_paths(out) == ["pkg/mod.py"]
    assert [(r.rule, r.action) for r in report.records] == [("runner_hook", "flagged")]
    assert report.voiding
    _, report = neutralise(GOLD.replace("+a = 2", f"+{line}"), repo="pytest-dev/pytest")
    assert not report.records  # pytest's own source is allowed to be pytest


def test_disabled_shadow_check_and_custom_test_dirs():
    config = IntegrityConfig(shadow_check=False, test_dirs=["spec"])
    kept, records = kept_and_rules(
        new_file("pytest.py", "") + new_file("spec/a.py", "") + new_file("tests/b.py", ""), config=config
    )
    assert kept == ["pytest.py", "tests/b.py"] and records == [("spec/a.py", "test_dir", "dropped")]


def test_section_files_lists_only_changed_settings():
    assert section_files(new_file("setup.cfg", "[x]") + GOLD) == []  # new: nothing to read
    assert section_files(GOLD.replace("pkg/mod.py", "setup.cfg")) == ["setup.cfg"]


def test_roundtrip_of_binary_rename_and_no_newline(tmp_path):
    patch = git_diff(
        tmp_path,
        {"a.bin": "x\0y", "old.py": "z = 1\n" * 30, "n.txt": "a"},
        {"a.bin": "x\0z", "old.py": None, "new.py": "z = 1\n" * 30, "n.txt": "b"},
    )
    pre, files = split_patch(patch)
    assert join_patch(pre, files) == patch
    assert sorted(p for f in files for p in f.paths) == ["a.bin", "n.txt", "new.py", "old.py"]


def test_strict_report_fails_missing_skipped_and_contradicted():
    f2p, p2p = ["t.py::a", "t.py::b"], ["t.py::c", "u.py::d"]
    statuses = {"t.py::a": "PASSED", "t.py::b": "SKIPPED", "t.py::c": "XFAIL"}
    f_ok, f_bad, p_ok, p_bad, note = strict_report(statuses, f2p, p2p)
    assert (f_ok, f_bad, p_ok, p_bad) == (["t.py::a"], ["t.py::b"], ["t.py::c"], ["u.py::d"])
    assert "did not run" in note and "skipped" in note
    log = "FAILED t.py::a - boom\nPASSED t.py::a\n"
    assert strict_report({"t.py::a": "PASSED"}, ["t.py::a"], [], log)[1] == ["t.py::a"]
    log = "PASSED t.py::a\nERROR t.py - ImportError\n"
    assert strict_report({"t.py::a": "PASSED"}, ["t.py::a"], [], log)[1] == ["t.py::a"]
    assert strict_report({"t.py::a": "PASSED"}, ["t.py::a"], [], "PASSED t.py::a\n")[0] == ["t.py::a"]
