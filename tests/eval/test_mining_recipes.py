"""Environment recipes (issue 49, item 1, first step): the file format, detection from the commit's tree,
the environment image's install step resolved as of the commit's date, and the miner using a recipe's
test command and parser."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from swe_rl.eval.mining.cli import Miner, main, parse_args
from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.eval.mining.recipes import Recipe, RecipeError, detect_recipe, load_recipe

pytest.importorskip("tomllib")  # recipes are TOML: Python 3.11+

PYPROJECT = """[project]
name = "calc"
version = "0.1"
requires-python = ">=3.8"
dependencies = ["attrs>=21"]

[project.optional-dependencies]
test = ["hypothesis"]
docs = ["sphinx"]
"""


def _repo(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_GLOBAL": "/dev/null"}  # fmt: skip
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "import"]):
        subprocess.run(["git", "-C", str(path), *args], env=env, check=True, capture_output=True)
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_recipe_file_overrides_key_by_key_and_refuses_what_it_cannot_use():
    base = Recipe(dependencies=["pytest"], install="pip install -e .")
    recipe = load_recipe(
        'test_command = "pytest -x {tests}"\nexclude_newer = false\nsetup = "make"\n', base=base
    )
    assert recipe == Recipe(
        dependencies=["pytest"],
        install="pip install -e .",
        setup="make",
        exclude_newer=False,
        test_command="pytest -x {tests}",
    )
    for text, why in (
        ("colour = 1", "unknown key(s) colour"),
        ("dependencies = 'pytest'", "dependencies must be a list of strings"),
        ("exclude_newer = 'yes'", "exclude_newer must be bool"),
        ('python = "3.8"', "python 3.8 is not offered here"),
        ("python = ", "not TOML"),
    ):
        with pytest.raises(RecipeError, match=re.escape(why)):
            load_recipe(text, where="r.toml")


def test_detection_reads_the_project_and_the_repositorys_recipe_file(tmp_path):
    commit = _repo(
        tmp_path / "a",
        {"pyproject.toml": PYPROJECT, "requirements-test.txt": "# tests\nmock==4.0 # pin\n-e .\n"},
    )
    recipe = detect_recipe(tmp_path / "a", commit)
    assert recipe.python == "3.11"  # requires-python >=3.8 admits Debian's 3.11
    # the project with its test extra (not docs'), its test requirements, pytest
    assert (
        recipe.install
        == "uv pip install --exclude-newer-package setuptools=2025-01-01T00:00:00Z -e '.[test]' -r requirements-test.txt pytest"
    )
    commit = _repo(
        tmp_path / "b", {"setup.py": "", ".swe-rl/recipe.toml": 'log_parser = "parse_log_pytest_v2"\n'}
    )
    recipe = detect_recipe(tmp_path / "b", commit)
    assert (
        recipe.install == "uv pip install --exclude-newer-package setuptools=2025-01-01T00:00:00Z -e . pytest"
        and recipe.log_parser == "parse_log_pytest_v2"
    )
    assert (
        detect_recipe(tmp_path / "b", commit).language(LANGUAGES["python"]).log_parser
        == "parse_log_pytest_v2"
    )


def test_the_miner_runs_the_recipes_test_command_and_refuses_a_bad_recipe(tmp_path):
    repo = tmp_path / "r"
    commit = _repo(repo, {"pyproject.toml": '[project]\nname = "r"\n', ".swe-rl/recipe.toml": "nope = 1\n"})
    given = tmp_path / "recipe.toml"
    given.write_text('test_command = "python3 -m pytest -q {tests}"\n')
    out = tmp_path / "o" / "tasks.jsonl"
    out.parent.mkdir()
    miner = Miner(parse_args([str(repo), "--output", str(out), "--recipe", str(given)]))
    assert miner.language(commit).command_for(["t.py"]) == "python3 -m pytest -q t.py"
    # the repository's own recipe file is bad: that commit is dropped with the reason
    assert Miner(parse_args([str(repo), "--output", str(out)])).split(commit) is None
    (drop,) = [json.loads(line) for line in out.with_suffix(".drops.jsonl").read_text().splitlines()]
    assert drop["stage"] == "split" and "unknown key(s) nope" in drop["reason"]
    given.write_text("python = 2\n")
    assert main([str(repo), "--output", str(out), "--recipe", str(given)]) == 2
