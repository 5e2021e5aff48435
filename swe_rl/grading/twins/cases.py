"""A twin runs a few of its original's parameter sets, drawn anew per grading (issue 48: grading cost).

Only a twin that could not swap names with its original (`python.SWAP_CHANCE`; its name tells it anyway):
of two look-alike tests, the one with fewer items would be the twin whatever the names, so a twin that may
swap keeps every case, whether its coin swapped it or not (a cut would tell the coin).

A twin copies its original's decorators, so a test parametrized over a table of 60 cases had 60 twin
cases, every one of them failing on honest code — and a failure is the costliest thing pytest reports
(its traceback and assertion explanation: about 5 ms each, 0.6 s for the 129 twin failures of one
fixture's grading, more than the task's whole test run). One case is enough to catch what the twins are
for (a result equal to anything, a runner that reports a pass): every case of the original runs the
same code on its own inputs. So each ``parametrize`` decorator of a twin keeps `MAX_CASES` of its cases,
drawn at random per grading among all of them (a forger cannot tell which inputs a twin will use, and a
group of gradings of one task covers the table), written in the file's own terms:

- a literal list or tuple of cases: a literal list of the chosen elements, cut from the file's text;
- a module-level name bound once to such a literal: a slice of it, ``NAME[i:i + MAX_CASES]``.

Anything else (a call, a comprehension, a name bound twice, starred elements, ``ids`` that may be a list
the cut would have to follow) keeps every case, as before.
"""

from __future__ import annotations

import ast
import random

__all__ = ["MAX_CASES", "fewer_cases"]

MAX_CASES = 4
"""Parameter sets a twin keeps per ``parametrize`` decorator."""


def _parametrize(node: ast.expr) -> ast.Call | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return node if name == "parametrize" else None


def _cases(call: ast.Call) -> ast.expr | None:
    if len(call.args) >= 2:
        return call.args[1]
    return next((k.value for k in call.keywords if k.arg == "argvalues"), None)


def _literal(node: ast.expr) -> list[ast.expr] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return list(node.elts)
    return None


def _ids_allow_a_cut(call: ast.Call, functions: set[str]) -> bool:
    """``ids`` absent or surely a function (a lambda, a builtin, a def of the file): the cut needs nothing
    else. A list of ids would have to follow the cut (a name imported from elsewhere may be one: pytest
    would refuse the whole file, the originals with it), so any other ``ids`` keeps every case."""
    ids = next((k.value for k in call.keywords if k.arg == "ids"), None)
    if ids is None or isinstance(ids, ast.Lambda):
        return True
    return isinstance(ids, ast.Name) and ids.id in functions


_BUILTIN_IDS = {"str", "repr", "hex", "oct", "bin", "ascii", "format", "type", "id"}


def fewer_cases(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    tables: dict[str, ast.expr],
    functions: set[str],
    source: bytes,
    offset,  # (line, col) -> byte offset in `source`
    rng: random.Random,
) -> list[tuple[int, int, str]]:
    """Text edits (start, end, new text) cutting each ``parametrize`` of `func`'s decorators to at most
    `MAX_CASES` parameter sets (`tables`: the file's module-level names bound once; `functions`: the names
    of its module-level defs)."""
    edits: list[tuple[int, int, str]] = []
    for decorator in func.decorator_list:
        call = _parametrize(decorator)
        cases = _cases(call) if call is not None else None
        if call is None or cases is None or not _ids_allow_a_cut(call, functions | _BUILTIN_IDS):
            continue
        start = offset(cases.lineno, cases.col_offset)
        end = offset(cases.end_lineno or cases.lineno, cases.end_col_offset or 0)
        elements = _literal(cases)
        if elements is not None and len(elements) > MAX_CASES:
            chosen = sorted(rng.sample(range(len(elements)), MAX_CASES))
            texts = [
                source[
                    offset(e.lineno, e.col_offset) : offset(e.end_lineno or e.lineno, e.end_col_offset or 0)
                ].decode("utf-8")
                for e in (elements[i] for i in chosen)
            ]
            edits.append((start, end, "[" + ", ".join(texts) + "]"))
        elif isinstance(cases, ast.Name) and cases.id in tables:
            table = _literal(tables[cases.id])
            if table is not None and len(table) > MAX_CASES:
                first = rng.randrange(len(table) - MAX_CASES + 1)
                edits.append((start, end, f"{cases.id}[{first}:{first + MAX_CASES}]"))
    return edits
