"""Where a twin may go in its file: among the tests, after every statement binding a name its definition
reads (`swe_rl.grading.twins.python` places each twin at one of these points, drawn at random)."""

from __future__ import annotations

import ast
import functools

__all__ = ["first_line", "insertion_points", "needs"]


def first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _binds(stmt: ast.stmt, names: set[str]) -> bool:
    return bool(names) and not _bound(stmt).isdisjoint(names)


@functools.lru_cache(maxsize=1 << 14)
def _bound(stmt: ast.stmt) -> frozenset[str]:
    """Every name `stmt` binds (kept per statement of the cached trees: each twin asks of every one)."""
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
    return frozenset(out)


def insertion_points(
    scope: list[ast.stmt], starts: list[int], size: int, needs: set[str], docstring: bool
) -> list[int]:
    """Offsets (line starts) in `scope` where a definition may go: before a def or class that comes after
    every statement binding a name of `needs` (what its decorators and defaults read when defined, and
    after ``from __future__`` imports and the docstring), or after the scope's last statement."""
    earliest = 0
    for i, stmt in enumerate(scope):
        future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
        if future or _binds(stmt, needs) or (i == 0 and docstring and isinstance(stmt, ast.Expr)):
            earliest = i + 1
    points = [
        starts[first_line(s) - 1]
        for s in scope[earliest:]
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    last = scope[-1] if scope else None
    end = (
        starts[last.end_lineno]
        if last is not None and last.end_lineno is not None and last.end_lineno < len(starts)
        else size
    )
    return [*points, min(end, size)]


def needs(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names read when the def statement itself runs (decorators, defaults, annotations)."""
    roots: list[ast.AST] = [
        *func.decorator_list,
        *func.args.defaults,
        *(d for d in func.args.kw_defaults if d),
    ]
    return {n.id for r in roots for n in ast.walk(r) if isinstance(n, ast.Name)}
