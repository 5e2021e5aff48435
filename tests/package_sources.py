"""The package's source files, each parsed once per test process: several checks walk every module."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

parse = functools.cache(ast.parse)
"""`ast.parse` of a source text, cached (the trees are only read, never changed)."""

ROOT = Path(__file__).resolve().parents[1]
# folder -> the package it ships as (pyproject's package-dir: the configs live in the top-level configs/)
PACKAGE_DIRS = {ROOT / "swe_rl": ("swe_rl",), ROOT / "configs": ("swe_rl", "configs")}


def package_files() -> list[Path]:
    """Every .py file of the package, wherever pyproject maps it from."""
    return sorted(p for folder in PACKAGE_DIRS for p in folder.rglob("*.py"))


def module_parts(path: Path) -> tuple[str, ...]:
    """swe_rl/fleet/client.py -> (swe_rl, fleet, client); configs/__init__.py -> (swe_rl, configs, __init__)."""
    for folder, package in PACKAGE_DIRS.items():
        if path.is_relative_to(folder):
            return package + path.relative_to(folder).with_suffix("").parts
    raise ValueError(f"{path} is not in the package")
