"""What a project settings file tells the test runner, read with real parsers (tomllib, configparser).

A textual scan of ``pyproject.toml`` misses ``[tool."\\u0070ytest".ini_options]`` (a TOML escape),
a section hidden in or revealed by a multi-line string, dotted keys (``tool.pytest.ini_options.addopts
= ...`` at the top level), inline tables. So the settings are parsed, and `runner_settings` keeps
every value whose key path names the runner (any key containing ``pytest``, after Unicode NFKC and
case folding: ``tool.pytest.*``, ``[tool:pytest]``, ``[pytest]``, ``pytest11`` entry points) and every
string value that names it outside a linter's or formatter's section (the old ini-in-a-value form of
entry points); a patch changes the runner's configuration exactly when that projection differs
before and after.
"""

from __future__ import annotations

import configparser
import importlib
import re
import unicodedata
from collections.abc import Callable
from typing import Any


def _toml_parser() -> Callable[[str], dict[str, Any]] | None:
    """tomllib (Python 3.11+), else tomli (the same parser, 3.10), else None (every TOML file unparsable)."""
    for name in ("tomllib", "tomli"):
        try:
            loads: Callable[[str], dict[str, Any]] = importlib.import_module(name).loads
            return loads
        except ImportError:
            continue
    return None


_load_toml = _toml_parser()
load_toml = _load_toml
"""TOML's parser here (None where Python has none): what the runner probes parse ``Cargo.toml`` with."""

__all__ = [
    "RUNNER_CONFIG_FILES",
    "UNPARSABLE",
    "load_toml",
    "normalise_name",
    "runner_lines",
    "runner_settings",
    "universal_lines",
]

RUNNER_CONFIG_FILES = {"pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", ".pytest.ini", "pytest.toml"}
"""Base names (normalised) of the files whose runner settings are compared."""
UNPARSABLE = {"<unparsable>": "<unparsable>"}
"""The projection of a file the parser refuses (a change to or from it counts as a change)."""
_RUNNER_WORDS = ("pytest", "unittest", "nose")


def runner_lines(text: str) -> str:
    """`text` split into lines as iniconfig 2 (pytest 7.3+'s ini reader) splits them, joined with ``\\n``.

    pytest reads an ini file in text mode (``\\r\\n`` and ``\\r`` become ``\\n``); iniconfig 2 splits
    the text with ``str.splitlines``, which also breaks at ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``,
    ``\\x85``, ``\\u2028`` and ``\\u2029``; configparser splits on ``\\n`` alone, so a section behind any
    of those would be a value to it and a section to pytest."""
    return "\n".join(text.splitlines())


def universal_lines(text: str) -> str:
    """`text` split as iniconfig 1 (Debian bookworm's, pytest 7.2's) splits it: the file's lines in text
    mode, universal newlines only (``\\n``, ``\\r``, ``\\r\\n``)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def normalise_name(name: str) -> str:
    """Unicode NFKC, then case-folded: the form every rule compares names in."""
    return unicodedata.normalize("NFKC", name).casefold()


def _names_runner(key: str) -> bool:
    key = normalise_name(key)
    return any(w in key for w in _RUNNER_WORDS)


_OTHER_TOOLS = frozenset(
    "isort flake8 pycodestyle pydocstyle pylint mypy black ruff yapf codespell pyright bumpversion "
    "bumpver towncrier check-manifest darglint doc8 pep8 autopep8 pylama".split()
)
"""Linters and formatters: their settings are never read by a test run, so a value of theirs that
merely *names* the runner (``[isort] known_third_party = pytest``) is not a runner setting. A key
naming the runner counts in any section (``[isort] pytest_plugins = ...``)."""


def _other_tools_section(path: tuple[str, ...]) -> bool:
    """Whether `path` lies in a linter's or formatter's section (``[isort]``, ``[tool:isort]``,
    ``[mypy-pkg.*]``, ``tool.pylint.MASTER``)."""
    head = [normalise_name(p) for p in path[:2]]
    name = head[1] if len(head) > 1 and head[0] == "tool" else head[0] if head else ""
    name = name.removeprefix("tool:")
    return name in _OTHER_TOOLS or re.split(r"[. -]", name, maxsplit=1)[0] in _OTHER_TOOLS


def _flatten(value: Any, path: tuple[str, ...], out: dict[str, str], inside: bool) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(sub, (*path, str(key)), out, inside or _names_runner(str(key)))
        return
    named = isinstance(value, str) and _names_runner(value) and not _other_tools_section(path)
    if inside or named:
        out[".".join(normalise_name(p) for p in path)] = repr(value)


def runner_settings(name: str, text: str | None) -> dict[str, str]:
    """Flattened key path -> value of every runner setting in `text` (a file of base name `name`;
    None: no such file)."""
    if text is None:
        return {}
    base = normalise_name(name)
    out: dict[str, str] = {}
    if base.endswith(".toml"):
        if _load_toml is None:
            return dict(UNPARSABLE)
        try:
            data = _load_toml(text)
        except ValueError:  # TOMLDecodeError is a ValueError
            return dict(UNPARSABLE)
        _flatten(data, (), out, inside=base in ("pytest.toml", ".pytest.toml"))
        return out
    # The runner's version decides where its lines end: a setting seen under either split counts (TOML
    # needs nothing of the kind: pytest and the grader both read it with tomllib). Where the grader and
    # the runner still disagree, the runner probe (`swe_rl.grading.runner.probe`) decides.
    views = [_ini_settings(base, runner_lines(text)), _ini_settings(base, universal_lines(text))]
    if views[0] == views[1]:
        return views[0]
    return {
        **views[0],
        **{f"{k} [universal newlines]": v for k, v in views[1].items() if views[0].get(k) != v},
    }


def _ini_settings(base: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    parser = configparser.RawConfigParser(strict=False, allow_no_value=True, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
    except configparser.Error:
        return dict(UNPARSABLE)
    whole = base in ("pytest.ini", ".pytest.ini")
    for section in parser.sections():
        items = {k: v if v is not None else "" for k, v in parser.items(section, raw=True)}
        runner_section = _names_runner(section) and not _other_tools_section(
            (section,)
        )  # not [mypy-pytest.*]
        _flatten(items, (section,), out, inside=whole or runner_section)
    return out
