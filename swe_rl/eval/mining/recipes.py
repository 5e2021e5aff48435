"""Environment recipes: how one repository's task environment is made and its tests run.

A recipe says which Python, how the project and its dependencies are installed (resolved as they
were on the commit's date: ``uv pip install`` under ``UV_EXCLUDE_NEWER``, ``npm install`` under
``npm_config_before``; envs.py), what else to run, the test command and its log parser. What is not
set is detected from the commit's tree (env_detect.py); a small TOML file overrides it key by key
(``swe-mine-tasks --recipe FILE``, or ``.swe-rl/recipe.toml`` in the repository)::

    python = "3.11"                     # Debian's python3.X of the toolchain image
    install = "uv pip install -e '.[tests]' 'pytest<8'"   # in /testbed, with network, once per environment
    dependencies = ["hypothesis"]       # appended to the (detected or given) Python install command
    setup = "npm run build"             # after the install, still with network
    exclude_newer = true                # resolve as of the commit's date (default)
    test_command = "python3 -m pytest -rA -p no:cacheprovider {tests}"
    log_parser = "parse_log_pytest"
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from swe_rl.eval.mining.env_detect import node_runner, python_install
from swe_rl.eval.mining.history import git
from swe_rl.eval.mining.languages import RepoLanguage

__all__ = ["DEBIAN_PYTHONS", "Recipe", "RecipeError", "detect_recipe", "load_recipe"]

DEBIAN_PYTHONS = ("3.11",)
"""The Pythons the toolchain images offer (Debian bookworm's); a recipe asking another is refused."""
REPO_RECIPE = ".swe-rl/recipe.toml"


class RecipeError(ValueError):
    """A recipe file that cannot be used (bad TOML, an unknown key, a wrong type, a Python not offered)."""


def _toml(text: str, where: str) -> dict[str, Any]:
    """``text`` parsed by the standard library's TOML reader (Python 3.11+: ``tomllib``)."""
    try:
        tomllib: Any = importlib.import_module("tomllib")
    except ModuleNotFoundError as exc:
        raise RecipeError(f"{where}: reading TOML needs Python 3.11 or later (tomllib)") from exc
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{where}: not TOML: {exc}") from exc
    return data


@dataclass(frozen=True)
class Recipe:
    """How one repository's environment is made; empty fields: the language's defaults."""

    python: str = ""
    dependencies: list[str] = field(default_factory=list)
    install: str = ""
    setup: str = ""
    exclude_newer: bool = True
    test_command: str = ""
    log_parser: str = ""

    def language(self, base: RepoLanguage) -> RepoLanguage:
        """``base`` with this recipe's test command and parser (when set)."""
        return replace(
            base,
            test_command=self.test_command or base.test_command,
            log_parser=self.log_parser or base.log_parser,
        )


def load_recipe(text: str, *, base: Recipe | None = None, where: str = "recipe") -> Recipe:
    """``base`` with the keys of the TOML ``text`` over it; `RecipeError` names what is wrong."""
    data = _toml(text, where)
    known = {f.name: f for f in fields(Recipe)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise RecipeError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    for key, value in data.items():
        want = bool if key == "exclude_newer" else list if key == "dependencies" else str
        if not isinstance(value, want) or (
            isinstance(value, list) and not all(isinstance(v, str) for v in value)
        ):
            raise RecipeError(
                f"{where}: {key} must be {'a list of strings' if want is list else want.__name__}"
            )
    recipe = replace(base or Recipe(), **data)
    if recipe.python and recipe.python not in DEBIAN_PYTHONS:
        raise RecipeError(
            f"{where}: python {recipe.python} is not offered here (only {', '.join(DEBIAN_PYTHONS)})"
        )
    return recipe


def _show(repo: Path, commit: str, path: str) -> str | None:
    out = git(repo, "show", f"{commit}:{path}", check=False)
    return out or None


def detect_recipe(repo: Path, commit: str, language: str = "python") -> Recipe:
    """What the tree at ``commit`` says (env_detect.py), then ``.swe-rl/recipe.toml`` over it."""
    recipe = Recipe()
    if language == "python":
        python = ""
        pyproject = _show(repo, commit, "pyproject.toml")
        if pyproject:
            try:
                requires = _toml(pyproject, "pyproject.toml").get("project", {}).get("requires-python")
            except RecipeError:
                requires = None
            python = _python_for(str(requires)) if requires else ""
        recipe = Recipe(python=python, install=python_install(repo, commit))
    elif language == "javascript":
        runner = node_runner(repo, commit)
        if runner:
            recipe = Recipe(test_command=runner[0], log_parser=runner[1])
    override = _show(repo, commit, REPO_RECIPE)
    return load_recipe(override, base=recipe, where=REPO_RECIPE) if override else recipe


def _python_for(requires: str) -> str:
    """The offered Python that ``requires-python`` admits ("" when none does: the default is kept)."""
    for version in DEBIAN_PYTHONS:
        if _admits(requires, version):
            return version
    return ""


def _admits(spec: str, version: str) -> bool:
    have = tuple(int(x) for x in version.split("."))
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.match(r"(>=|<=|==|!=|~=|>|<)\s*([\d.]+)", clause)
        if not m:
            continue
        op, want = m.group(1), tuple(int(x) for x in m.group(2).split(".") if x)[:2]
        ok = {">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want,
              "==": have[: len(want)] == want, "!=": have[: len(want)] != want, "~=": have >= want}[op]  # fmt: skip
        if not ok:
            return False
    return True
