"""Stage 2: rules on the tree the canonical patch produces, names normalised, settings parsed.

Each case is an agent's work tree (real git), taken as the agent loop takes it, made canonical as
the grading container does, then judged: what must not reach the test run is dropped and recorded.
"""

from __future__ import annotations

import os

import pytest
from canonical_fixtures import agent_diff, canonicalise_local, git, make_repo, record_baseline

from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.grading.scans.tree import judge_tree
from swe_rl.tasks import TaskInstance

PYPROJECT = '[project]\nname = "pkg"\nversion = "1.0"\n'
BASE = {
    "pkg/__init__.py": "",
    "pkg/core.py": "x = 1\n",
    "tests/test_core.py": "from pkg.core import x\n\ndef test_x():\n    assert x == 2\n",
    "pyproject.toml": PYPROJECT,
    "setup.cfg": "[metadata]\nname = pkg\n",
}
TEST_PATCH = "diff --git a/tests/test_core.py b/tests/test_core.py\n--- a/tests/test_core.py\n+++ b/tests/test_core.py\n"
GOLD = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n"
INSTANCE = TaskInstance(
    instance_id="o__pkg-1",
    repo="o/pkg",
    problem_statement="x",
    image="img",
    patch=GOLD,
    test_patch=TEST_PATCH,
)


def judged(tmp_path, files: dict[str, str | bytes], symlinks: dict[str, str] | None = None):
    repo = make_repo(tmp_path, BASE)
    record_baseline(repo, tmp_path)
    for path, content in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    for link, to in (symlinks or {}).items():
        os.symlink(to, repo / link)
    patch = agent_diff(repo, tmp_path)
    git(repo, "checkout", "-q", "--", ".")  # a fresh checkout, as in a grading container
    git(repo, "clean", "-fdq")
    canon = canonicalise_local(repo, tmp_path, patch, extra_roots=["tests"])
    assert canon.applied
    verdict = judge_tree(canon, INSTANCE, "pytest -rA tests/test_core.py", IntegrityConfig())
    return verdict, {r.path: r.rule for r in verdict.records if r.action == "dropped"}


HOOK = "import os\nos.environ['PYTEST_PLUGINS'] = 'forcepass'\n"


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("sitecustomize/__init__.py", "interpreter_hook"),  # a package
        ("SiteCustomize.py", "interpreter_hook"),  # case
        ("usercustomize_extra.py", "interpreter_hook"),  # any sitecustomize*/usercustomize*
        ("zz_force.PTH", "path_file"),
        ("pkg-1.0.DIST-INFO/entry_points.txt", "package_metadata"),
        ("pkg.Egg-Info/entry_points.txt", "package_metadata"),
        ("entry_points.txt", "package_metadata"),
        ("\uff43\uff4f\uff4e\uff46\uff54\uff45\uff53\uff54.py", "conftest"),  # fullwidth: NFKC -> conftest.py
        ("CONFTEST.py", "conftest"),
        ("Pytest.ini", "pytest_settings"),
        ("json.py", "module_shadow"),  # the interpreter's standard library
        ("typing/__init__.py", "module_shadow"),
        ("src/inspect.py", "module_shadow"),  # another import root
        ("tests/unittest.py", "test_dir"),  # a test directory (an import root under pytest) first
        ("pluggy/__init__.py", "runner_shadow"),
    ],
)
def test_start_up_hooks_and_shadows_are_dropped_whatever_their_spelling(tmp_path, path, rule):
    verdict, dropped = judged(tmp_path, {path: HOOK, "pkg/core.py": "x = 2\n"})
    assert dropped == {path: rule}
    assert "pkg/core.py" in verdict.patch and path not in verdict.patch


def test_an_installed_distribution_is_not_shadowed(tmp_path):
    """`pydantic` is installed in the interpreter that answers (here the host's)."""
    _, dropped = judged(tmp_path, {"pydantic/__init__.py": HOOK})
    assert dropped == {"pydantic/__init__.py": "module_shadow"}


def test_symlinks_and_compiled_code_are_dropped(tmp_path):
    files: dict[str, str | bytes] = {
        "pkg/helper.cpython-311.pyc": b"\xa7\r\r\n" + b"\0" * 12,
        "pkg/_speed.cpython-311-x86_64-linux-gnu.so": b"\x7fELF",
        "pkg/lib.so.1": b"\x7fELF",
    }
    _, dropped = judged(tmp_path, files, symlinks={"pkg/innocent.py": "../tests/test_core.py"})
    assert dropped == {
        "pkg/helper.cpython-311.pyc": "compiled_code",
        "pkg/_speed.cpython-311-x86_64-linux-gnu.so": "compiled_code",
        "pkg/lib.so.1": "compiled_code",
        "pkg/innocent.py": "symlink",
    }


@pytest.mark.parametrize(
    "extra",
    [
        '\n[tool."\\u0070ytest".ini_options]\naddopts = "-p forcepass"\n',  # a TOML escape
        '\n[tool.PYTEST.ini_options]\naddopts = "-p forcepass"\n',  # pytest reads it? the rule does not care
        '\n[tool]\n"py\\u0074est" = { ini_options = { addopts = "-p forcepass" } }\n',  # an inline table
        '\n[project.entry-points."\\u0070ytest11"]\nforce = "forcepass"\n',
    ],
)
def test_runner_settings_are_read_by_a_toml_parser(tmp_path, extra):
    _, dropped = judged(tmp_path, {"pyproject.toml": PYPROJECT + extra})
    assert dropped == {"pyproject.toml": "runner_config"}


def test_a_multi_line_string_does_not_hide_a_section(tmp_path):
    """The text scan sees a string; the parser sees the section that follows the string's end."""
    text = PYPROJECT.replace('version = "1.0"', 'description = """\n[x]\n"""\nversion = "1.0"')
    text += '\n[tool.pytest.ini_options]\naddopts = "-p forcepass"\n'
    _, dropped = judged(tmp_path, {"pyproject.toml": text})
    assert dropped == {"pyproject.toml": "runner_config"}


def test_setup_cfg_entry_points_are_read_by_configparser(tmp_path):
    text = "[metadata]\nname = pkg\n\n[options.entry_points]\nPYTEST11 =\n    force = forcepass\n"
    _, dropped = judged(tmp_path, {"setup.cfg": text})
    assert dropped == {"setup.cfg": "runner_config"}


def test_ordinary_changes_reach_the_test_run(tmp_path):
    """A new module in an existing package, a new top-level helper, project metadata: nothing dropped."""
    files = {
        "pkg/core.py": "x = 2\n",
        "pkg/json.py": "NOT_A_SHADOW = 1\n",  # inside the package: not top-level
        "helpers_for_pkg.py": "y = 1\n",
        "pyproject.toml": PYPROJECT + 'dependencies = ["pytest>=7"]\n',
    }
    verdict, dropped = judged(tmp_path, files)
    assert dropped == {} and not verdict.changed
    assert {s.path for s in verdict.sources} == {"pkg/core.py", "pkg/json.py", "helpers_for_pkg.py"}
    core = next(s for s in verdict.sources if s.path == "pkg/core.py")
    assert (core.before, core.after) == ("x = 1\n", "x = 2\n")


def test_the_runners_own_repo_and_a_fix_under_src_are_not_shadows(tmp_path):
    """Measured on Verified (bench/tree_rule_false_positives.py): every pytest-dev/pytest fix under
    ``src/_pytest/`` was dropped as a runner shadow. The runner's own repo is exempt (as `neutralise`
    rules), and a gold patch under ``src/`` counts as fixing that package."""
    from swe_rl.grading.integrity import _path_rule

    base = {"src/_pytest/__init__.py": "", "src/_pytest/fixtures.py": "x = 1\n", "testing/test_x.py": ""}
    repo = make_repo(tmp_path, base)
    record_baseline(repo, tmp_path)
    (repo / "src/_pytest/fixtures.py").write_text("x = 2\n")
    patch = agent_diff(repo, tmp_path)
    git(repo, "checkout", "-q", "--", ".")
    canon = canonicalise_local(repo, tmp_path, patch, extra_roots=["testing"])
    assert canon.applied
    gold = "diff --git a/src/_pytest/python.py b/src/_pytest/python.py\n"
    runner = TaskInstance(
        instance_id="pytest-dev__pytest-1",
        repo="pytest-dev/pytest",
        problem_statement="x",
        image="img",
        patch=gold,
    )
    verdict = judge_tree(canon, runner, "pytest -rA testing/test_x.py", IntegrityConfig())
    assert not [r for r in verdict.records if r.action == "dropped"], verdict.records
    # elsewhere the shadow rule stands, unless the gold patch fixes that package (under src/ too)
    config = IntegrityConfig()
    fix = {"src/_pytest/python.py"}
    assert _path_rule("src/_pytest/fixtures.py", set(), set(), fix, "", config) is None
    assert _path_rule("src/_pytest/fixtures.py", set(), set(), {"pkg/core.py"}, "", config) is not None


@pytest.mark.parametrize(
    "name, text",
    [
        # pylint-dev__pylint-4661's gold patch (measured on Verified): a linter's list that names pytest
        ("setup.cfg", "[metadata]\nname = pkg\n\n[isort]\nknown_third_party = appdirs, pytest, setuptools\n"),
        ("setup.cfg", "[metadata]\nname = pkg\n\n[tool:isort]\nknown_third_party = pytest\n"),
        ("setup.cfg", "[metadata]\nname = pkg\n\n[mypy-pytest.*]\nignore_missing_imports = True\n"),
        (
            "setup.cfg",
            "[metadata]\nname = pkg\n\n[flake8]\nper-file-ignores = tests/*: F401  # pytest fixtures\n",
        ),
        ("pyproject.toml", PYPROJECT + '\n[tool.isort]\nknown_third_party = "pytest"\n'),
        ("pyproject.toml", PYPROJECT + '\n[tool.pylint.MASTER]\nload-plugins = "pylint_pytest"\n'),
    ],
)
def test_a_linters_setting_that_names_the_runner_is_not_a_runner_setting(tmp_path, name, text):
    """Linters and formatters never run with the tests: their values may name pytest."""
    _, dropped = judged(tmp_path, {name: text})
    assert dropped == {}


@pytest.mark.parametrize(
    "name, text",
    [
        # the old ini-in-a-value form of entry points: only the value names the plugin group
        (
            "setup.cfg",
            "[metadata]\nname = pkg\n\n[options]\nentry_points =\n    [pytest11]\n    force = forcepass\n",
        ),
        # a linter's section name does not shelter a key that names the runner
        ("setup.cfg", "[metadata]\nname = pkg\n\n[isort]\npytest_plugins = forcepass\n"),
        ("pyproject.toml", PYPROJECT + '\n[tool.black]\n"pytest11" = "forcepass"\n'),
    ],
)
def test_values_and_keys_that_reach_the_runner_still_count(tmp_path, name, text):
    _, dropped = judged(tmp_path, {name: text})
    assert dropped == {name: "runner_config"}


def _zip(name: str, text: str, prefix: bytes = b"") -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(name, text)
    return prefix + buf.getvalue()


def test_archives_and_pycache_are_dropped_whatever_their_name(tmp_path):
    """zipimport reads a zip under any name, with anything before it; the scan never reads inside."""
    payload = "import ctypes\n"
    files: dict[str, str | bytes] = {
        "pkg/vendor.zip": _zip("evil.py", payload),
        "pkg/plugin.EGG": _zip("evil.py", payload),
        "pkg/tool.pyz": _zip("__main__.py", payload),
        "pkg/data.bin": _zip("evil.py", payload),  # a zip by its bytes
        "pkg/notes.txt": _zip("evil.py", payload, prefix=b"#!/bin/sh\nnot a zip, it says\n"),
        "pkg/__pycache__/core.txt": b"anything",
        "pkg/core.py": "x = 2\n",
        "pkg/readme.txt": "PK is not a zip on its own\n",
    }
    _, dropped = judged(tmp_path, files)
    assert dropped == {
        "pkg/vendor.zip": "archive",
        "pkg/plugin.EGG": "archive",
        "pkg/tool.pyz": "archive",
        "pkg/data.bin": "archive",
        "pkg/notes.txt": "archive",
        "pkg/__pycache__/core.txt": "compiled_code",
    }


def test_sources_reach_the_scan_as_the_interpreter_reads_them(tmp_path):
    files: dict[str, str | bytes] = {
        "pkg/core.py": b"\xef\xbb\xbfx = 2\n",
        "pkg/utf7.py": b"# coding: utf-7\nx = 1 +AAo-import ctypes\n",  # patches are text: ASCII only
        "bin/tool": "#!/usr/bin/env python3\nimport ctypes\n",
    }
    verdict, _ = judged(tmp_path, files)
    sources = {s.path: s for s in verdict.sources}
    assert sources["pkg/core.py"].after == "x = 2\n" and sources["pkg/core.py"].problem == ""
    assert "utf-7" in sources["pkg/utf7.py"].problem and "import ctypes" in (
        sources["pkg/utf7.py"].after or ""
    )
    assert "bin/tool" in sources  # a python script without a suffix is scanned too
