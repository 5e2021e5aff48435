"""A small local git repository with a known history, for the miner's tests (built, never stored).

Four commits after the import: a fix with its test (the one task), a docs-only change, a refactor
whose new test already passes before it, and a test-only change. Fixed dates and authors: the same
history gives the same shas on every machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PYPROJECT = '[project]\nname = "calc"\nversion = "0.1"\n'
CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_REFACTORED = CALC_FIXED + "\n\ndef square(a):\n    return mul(a, a)\n"
TEST_MUL = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
TEST_ADD = TEST_MUL + "\n\ndef test_add():\n    from calc import add\n\n    assert add(2, 3) == 5\n"
TEST_SQUARE_OLD = TEST_ADD + "\n\ndef test_mul_again():\n    assert mul(3, 3) == 9\n"
TEST_MORE = TEST_SQUARE_OLD + "\n\ndef test_mul_zero():\n    assert mul(0, 3) == 0\n"

HISTORY: list[tuple[str, dict[str, str]]] = [
    ("Import calc", {"pyproject.toml": PYPROJECT, "calc.py": CALC_BUGGY, "tests/test_calc.py": TEST_MUL}),
    (
        "Fix add: it subtracted\n\nadd(2, 3) returned -1.",
        {"calc.py": CALC_FIXED, "tests/test_calc.py": TEST_ADD},
    ),
    ("Docs", {"README.md": "# calc\n"}),
    ("Add square", {"calc.py": CALC_REFACTORED, "tests/test_calc.py": TEST_SQUARE_OLD}),
    ("More tests", {"tests/test_calc.py": TEST_MORE}),
]


def make_python_repo(path: Path) -> list[str]:
    """Create the repository at ``path``; returns the commit shas, oldest first."""
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_GLOBAL": "/dev/null"}  # fmt: skip

    def run(*args: str, when: int = 0) -> str:
        stamp = f"2024-01-0{1 + when}T00:00:00+0000"
        full = {**env, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        return subprocess.run(
            ["git", "-C", str(path), *args], env=full, check=True, capture_output=True, text=True
        ).stdout

    run("init", "-q", "-b", "main")
    shas = []
    for i, (message, files) in enumerate(HISTORY):
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        run("add", "-A")
        run("commit", "-q", "-m", message, when=i)
        shas.append(run("rev-parse", "HEAD").strip())
    return shas


def make_history(path: Path, commits: list[tuple[str, dict[str, str]]]) -> list[str]:
    """A repository whose commits are (ISO date, files written) in order; returns their shas."""
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_GLOBAL": "/dev/null"}  # fmt: skip

    def git(*args: str, when: str = "2024-01-01T00:00:00+00:00") -> str:
        full = {**env, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        return subprocess.run(
            ["git", "-C", str(path), *args], env=full, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q", "-b", "main")
    shas = []
    for when, files in commits:
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", f"at {when}", when=when)
        shas.append(git("rev-parse", "HEAD").strip())
    return shas
