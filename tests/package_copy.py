"""A copy of what the package is built from, for tests that build or install it away from the checkout
(building in the checkout would leave build/ and *.egg-info behind)."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("pyproject.toml", "README.md")
# swe_rl/ and the top-level configs/ the wheel ships as swe_rl.configs (pyproject's package-dir)
FOLDERS = ("swe_rl", "configs")


def copy_package_sources(dest: Path) -> Path:
    """Copy pyproject.toml, README.md, swe_rl/ and configs/ into ``dest`` (made when missing)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy(ROOT / name, dest / name)
    for name in FOLDERS:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest
