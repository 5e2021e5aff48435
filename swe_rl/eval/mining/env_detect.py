"""What a commit's tree says about its environment: the install command, the files it depends on, the runner.

Python: the project installed editable with its test extra (``-e '.[test]'`` when ``pyproject.toml``,
``setup.cfg`` or ``setup.py`` names one of `TEST_EXTRAS`), its test dependency group (PEP 735
``[dependency-groups]``, the first of `TEST_EXTRAS`), its test requirement files
(``requirements*.txt``, ``*requirements*.txt``, ``requirements/<test|tests|testing|dev>.txt``:
the test ones when there are, else the dev ones) passed as ``-r``, else ``tox.ini``'s
``[testenv] deps``; pytest always (resolved like the rest: the newest of the commit's date that the
other requirements admit). JavaScript: ``npm install`` (``--before`` the date comes from the
environment), and a runner read from ``devDependencies`` (jest, vitest, mocha, tape, ava: each with a
command whose output one of our parsers reads); node's own runner otherwise.
"""

from __future__ import annotations

import configparser
import importlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

from swe_rl.eval.mining.history import git

__all__ = ["TEST_EXTRAS", "toml_or_empty", "dependency_files", "node_runner", "python_install"]

TEST_EXTRAS = ("test", "tests", "testing", "dev")
_REQ_TOP = re.compile(r"^(.*[-_.])?requirements([-_.].*)?\.txt$")
_REQ_TEST = re.compile(r"(^|[-_./])(test|tests|testing)([-_.]|$)")
_REQ_DEV = re.compile(r"(^|[-_./])dev([-_.]|$)")
_NODE_RUNNERS = (  # devDependency -> (command, parser); the first one present wins
    ("jest", "npx jest --ci --verbose {tests}", "parse_log_jest"),
    ("vitest", "npx vitest run --reporter=verbose {tests}", "parse_log_vitest"),
    ("mocha", "npx mocha --reporter tap {tests}", "parse_log_tap"),
    ("tape", "npx tape {tests}", "parse_log_tap"),
    ("ava", "npx ava --tap {tests}", "parse_log_tap"),
)
PYTHON_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "tox.ini")
EDITABLE_SETUPTOOLS = "setuptools=2025-01-01T00:00:00Z"
"""The date cap of setuptools alone for an editable install: an editable install needs PEP 660
(setuptools 64, August 2022), so a project of an earlier date would fail to build ("no attribute
'build_editable'") with the setuptools of its own date; a fixed date keeps the environment's key stable."""
NODE_FILES = ("package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock")


def _tree(repo: Path, commit: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", commit).split("\n")


def _show(repo: Path, commit: str, path: str) -> str:
    return git(repo, "show", f"{commit}:{path}", check=False)


def dependency_files(repo: Path, commit: str, language: str) -> list[str]:
    """Paths of ``commit``'s tree an environment depends on (their contents key the environment image)."""
    paths = [p for p in _tree(repo, commit) if p]
    if language == "python":
        return [p for p in paths if p in PYTHON_FILES or _is_requirements(p)]
    if language == "javascript":
        return [p for p in paths if p in NODE_FILES]
    if language == "rust":
        return [p for p in paths if p.endswith("Cargo.toml") or p == "Cargo.lock"]
    if language == "go":
        return [p for p in paths if p in ("go.mod", "go.sum")]
    return []


def _is_requirements(path: str) -> bool:
    parts = path.split("/")
    if len(parts) == 1:
        return bool(_REQ_TOP.match(path))
    return len(parts) == 2 and parts[0] == "requirements" and parts[1].endswith((".txt", ".in"))


def toml_or_empty(text: str) -> dict[str, Any]:
    """``text`` read as TOML (``tomllib``, Python 3.11+); {} when it is not TOML or cannot be read."""
    try:
        data: dict[str, Any] = importlib.import_module("tomllib").loads(text)
    except (ImportError, ValueError):
        return {}
    return data


def _extras(repo: Path, commit: str, top: set[str]) -> set[str]:
    """The extras the project declares (those of `TEST_EXTRAS` are all we look for)."""
    found: set[str] = set()
    if "pyproject.toml" in top:
        data = toml_or_empty(_show(repo, commit, "pyproject.toml"))
        found |= set(data.get("project", {}).get("optional-dependencies", {}))
    if "setup.cfg" in top:
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(_show(repo, commit, "setup.cfg"))
            if cfg.has_section("options.extras_require"):
                found |= set(cfg["options.extras_require"])
        except configparser.Error:
            pass
    if "setup.py" in top:
        text = _show(repo, commit, "setup.py")
        found |= {m for m in TEST_EXTRAS if re.search(rf"""['"]{m}['"]\s*:|\b{m}\s*=\s*\[""", text)}
    return found & set(TEST_EXTRAS)


def _tox_deps(text: str) -> list[str]:
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(text)
    except configparser.Error:
        return []
    if not cfg.has_option("testenv", "deps"):
        return []
    args: list[str] = []
    for line in cfg.get("testenv", "deps").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            args += ["-r", line[2:].strip().replace("{toxinidir}/", "")]
        elif line and "{" not in line and ":" not in line.split(" ")[0]:
            args.append(line)
    return args


def python_install(repo: Path, commit: str) -> str:
    """The ``uv pip install`` command that installs the project and its test dependencies (run in
    ``/testbed`` with ``VIRTUAL_ENV`` and ``UV_EXCLUDE_NEWER`` set by the environment build)."""
    files = dependency_files(repo, commit, "python")
    top = {p for p in files if "/" not in p}
    args: list[str] = []
    installable = "setup.py" in top or (
        "pyproject.toml" in top
        and re.search(r"^\[(project|build-system)\]", _show(repo, commit, "pyproject.toml"), re.M)
    )
    if installable:
        extras = _extras(repo, commit, top)
        extra = next((e for e in TEST_EXTRAS if e in extras), "")
        args += ["--exclude-newer-package", EDITABLE_SETUPTOOLS, "-e", f".[{extra}]" if extra else "."]
    groups = (
        toml_or_empty(_show(repo, commit, "pyproject.toml")).get("dependency-groups", {})
        if "pyproject.toml" in top
        else {}
    )
    group = next((g for g in TEST_EXTRAS if g in groups), "")
    if group:  # PEP 735 (uv reads them from the pyproject.toml in the working folder)
        args += ["--group", group]
    reqs = [p for p in files if _is_requirements(p)]
    runtime = [p for p in reqs if p in ("requirements.txt", "requirements/main.txt")]
    tests = [p for p in reqs if _REQ_TEST.search(p)] or [p for p in reqs if _REQ_DEV.search(p)]
    for path in runtime + tests:
        args += ["-r", path]
    if not tests and "tox.ini" in top:
        args += _tox_deps(_show(repo, commit, "tox.ini"))
    args.append("pytest")
    return "uv pip install " + " ".join(shlex.quote(a) for a in args)


def node_runner(repo: Path, commit: str) -> tuple[str, str] | None:
    """(test command, parser) for the runner ``package.json`` names; None: node's own runner."""
    try:
        package = json.loads(_show(repo, commit, "package.json") or "{}")
    except json.JSONDecodeError:
        return None
    deps = {**package.get("dependencies", {}), **package.get("devDependencies", {})}
    for name, command, parser in _NODE_RUNNERS:
        if name in deps:
            return command, parser
    return None
