"""The README names only what exists: every file path, and every option of a console script it shows.

A new user copies the README's commands as they are; a renamed config (`configs/plugin_swe.yaml` where
the scripts pass `configs/plugin_launch.yaml`) or an option a tool does not have costs them the first hour.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
ROOTS = ("scripts", "configs", "docs", "data", "server", "third_party", "swe_rl", "eval", "bench", "tests")
PATH = re.compile(r"(?<![\w./~$-])((?:" + "|".join(ROOTS) + r")/[\w./-]*[\w/])")
_SCRIPTS_TABLE = (ROOT / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
SCRIPTS = set(re.findall(r"^([\w-]+) = ", _SCRIPTS_TABLE, flags=re.M))  # tomllib: Python 3.11+ only


def named_paths(text: str) -> set[str]:
    return {m.rstrip("/.") for m in PATH.findall(text) if "*" not in m}


def command_lines(text: str) -> list[str]:
    """Shell lines of the README: its code blocks (continuations joined) and its inline code spans."""
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.S)
    lines = [ln for block in blocks for ln in block.replace("\\\n", " ").splitlines()]
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return lines + spans


def script_options(text: str) -> dict[str, set[str]]:
    """{console script: the --options the README passes it}."""
    found: dict[str, set[str]] = {}
    for line in command_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        current = None
        for word in words:
            if word in SCRIPTS:
                current = word
                found.setdefault(word, set())
            elif word in ("&&", "|", ";", "||") or "=" in word and not word.startswith("-"):
                current = None
            elif current and word.startswith("--"):
                found[current].add(word.split("=", 1)[0])
    return found


@cache
def help_text(script: str) -> str:
    tool = Path(sys.executable).parent / script
    assert tool.exists(), f"{script} is not installed next to {sys.executable}"
    done = subprocess.run([str(tool), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_path_the_readme_names_exists():
    paths = named_paths(README)
    assert {
        "configs/plugin_launch.yaml",
        "scripts/run_swe_rl_8b_remote_2nodes.sh",
        "docs/training.md",
    } <= paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"the README names paths that do not exist: {missing}"


def test_the_check_finds_a_slip():
    assert named_paths("--custom-config-path configs/no_such.yaml") == {"configs/no_such.yaml"}
    assert script_options(
        "```bash\nswe-eval --data x --limit 2 && swe-local-fleet --exec-servers 1\n```"
    ) == {
        "swe-eval": {"--data", "--limit"},
        "swe-local-fleet": {"--exec-servers"},
    }


@pytest.mark.slow  # one interpreter per console script: seconds
def test_every_console_script_option_the_readme_shows_exists():
    shown = script_options(README)
    assert {"swe-eval", "swe-local-fleet"} <= set(shown)
    unknown = {s: sorted(o for o in opts if o not in help_text(s)) for s, opts in shown.items()}
    assert not {s: o for s, o in unknown.items() if o}, f"options the tools do not have: {unknown}"


def test_no_sys_path_manipulation_outside_tests():
    """Benches and fixture builders run as modules or import the installed package; only tests may
    put a folder on the import path (a script that does hides an import that fails elsewhere)."""
    manipulation = re.compile(
        r"sys\.path\.(insert|append|extend|remove)\(|sys\.path\s*(\[[^]]*\])?\s*=[^=]|addsitedir\("
    )
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = [
        f"{path}:{n}"
        for path in tracked
        if not path.startswith("tests/")
        for n, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1)
        if manipulation.search(line) and not line.lstrip().startswith("#")
    ]
    assert not offenders, f"sys.path manipulation outside tests: {offenders}"
