"""The package's source files, each parsed once per test process: several checks walk every module."""

from __future__ import annotations

import ast
import functools

parse = functools.cache(ast.parse)
"""`ast.parse` of a source text, cached (the trees are only read, never changed)."""
