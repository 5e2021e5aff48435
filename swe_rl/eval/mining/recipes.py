"""Environment recipes: how one repository's task environment is made and its tests run (first step).

A recipe says which Python, which dependencies (resolved as they were on the commit's date:
``uv pip install --exclude-newer <date>``), the project's install command, the test command and its
log parser. It is detected from the commit's tree (`detect_recipe`: ``requires-python``, the project's
dependencies and its test extras, ``requirements*test*.txt``) and overridden, key by key, by a small
TOML file (``swe-mine-tasks --recipe FILE``, or ``.swe-rl/recipe.toml`` in the repository)::

    python = "3.11"                     # Debian's python3.X of the toolchain image
    dependencies = ["pytest<8", "hypothesis"]
    install = "pip install --no-deps -e ."   # run in /testbed once the dependencies are in
    exclude_newer = true                # resolve as of the commit's date (default)
    test_command = "python3 -m pytest -rA -p no:cacheprovider {tests}"
    log_parser = "parse_log_pytest"

`env_dockerfile` renders the environment image (the toolchain image plus the dependencies: the only
build that needs the package index); task images stay thin, offline layers on top. Building and
sharing environment images between consecutive commits is the next step (docs/datasets.md).
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from swe_rl.eval.mining.history import git
from swe_rl.eval.mining.languages import RepoLanguage

__all__ = ["DEBIAN_PYTHONS", "Recipe", "RecipeError", "detect_recipe", "env_dockerfile", "load_recipe"]

DEBIAN_PYTHONS = ("3.11",)
"""The Pythons the toolchain images offer (Debian bookworm's); a recipe asking another is refused."""
REPO_RECIPE = ".swe-rl/recipe.toml"
TEST_EXTRAS = ("test", "tests", "testing", "dev")
_REQUIREMENT_FILES = re.compile(r"^requirements[-_.]?(test|tests|testing|dev)?\.txt$")


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


def detect_recipe(repo: Path, commit: str) -> Recipe:
    """What the tree at ``commit`` says (Python projects), then ``.swe-rl/recipe.toml`` over it."""
    deps: list[str] = []
    python, install = "", ""
    pyproject = _show(repo, commit, "pyproject.toml")
    if pyproject:
        try:
            project = _toml(pyproject, "pyproject.toml").get("project", {})
        except RecipeError:
            project = {}
        deps += [d for d in project.get("dependencies", []) if isinstance(d, str)]
        extras = project.get("optional-dependencies", {})
        for extra in TEST_EXTRAS:
            deps += [d for d in extras.get(extra, []) if isinstance(d, str)]
        if project.get("requires-python"):
            python = _python_for(str(project["requires-python"]))
        install = "pip install --no-deps -e ."
    top = git(repo, "ls-tree", "--name-only", commit).split()
    if not pyproject and "setup.py" in top:
        install = "pip install --no-deps -e ."
    for name in top:
        if _REQUIREMENT_FILES.match(name):
            lines = (_show(repo, commit, name) or "").splitlines()
            deps += [
                ln.split("#", 1)[0].strip()
                for ln in lines
                if ln.split("#", 1)[0].strip() and not ln.startswith("-")
            ]
    if install and not any(re.match(r"pytest\b", d) for d in deps):
        deps.append("pytest")
    recipe = Recipe(python=python, dependencies=list(dict.fromkeys(deps)), install=install)
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


def env_dockerfile(recipe: Recipe, from_image: str, commit_date: str) -> str:
    """The environment image: ``from_image`` plus the dependencies, resolved as of ``commit_date``."""
    lines = [f"FROM {from_image}"]
    if recipe.dependencies:
        python = f"python{recipe.python}" if recipe.python else "python3"
        when = f" --exclude-newer {shlex.quote(commit_date)}" if recipe.exclude_newer else ""
        deps = " ".join(shlex.quote(d) for d in recipe.dependencies)
        lines.append(f"RUN uv pip install --system --python {python}{when} {deps}")
    return "\n".join(lines) + "\n"
