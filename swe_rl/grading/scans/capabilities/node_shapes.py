"""Shapes of syntax-tree nodes the capability visitor asks about, each a pure predicate on one node.

The root name of an attribute chain, a package's own ``__path__``, a reference to ``__code__``, a path
ending in ``.py``, a compound statement, a folded ``/proc``, the words of a text. They read one node
and nothing of the visitor's state, so they live apart from `visitor._Visitor` and its rules.
"""

from __future__ import annotations

import ast

from swe_rl.grading.scans.capabilities.names import fold

__all__ = [
    "ends_with_py",
    "is_compound",
    "is_import_path",
    "is_proc",
    "mentions_code",
    "root_name",
    "words_of",
]


def root_name(node: ast.AST) -> str | None:
    """``a`` of ``a.b.c`` / ``a[k].b``; None when the chain starts elsewhere (a call, ``self``...)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def is_import_path(node: ast.AST) -> bool:
    """``__path__`` or ``x.__path__``: a package's own import path."""
    return (
        isinstance(node, ast.Name)
        and node.id == "__path__"
        or (isinstance(node, ast.Attribute) and node.attr == "__path__")
    )


def mentions_code(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Attribute) and sub.attr == "__code__" for sub in ast.walk(node))


def ends_with_py(node: ast.AST | None) -> bool:
    """A path whose last literal piece ends in ``.py`` (``os.path.join(d, "x.py")``, ``d / "x.py"``,
    ``f"{d}/x.py"``); an absolute literal path is not one (a file written at run time elsewhere)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.endswith(".py") and not node.value.startswith("/")
    if isinstance(node, ast.JoinedStr) and node.values:
        return ends_with_py(node.values[-1])
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
        return ends_with_py(node.right)
    if isinstance(node, ast.Call) and node.args:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        return name in {"join", "Path", "PurePath", "PosixPath"} and ends_with_py(node.args[-1])
    return False


def is_compound(node: ast.stmt) -> bool:
    """A statement with a body of statements (def, class, if, for, while, with, try, match)."""
    return any(isinstance(v, list) and v and isinstance(v[0], ast.stmt) for _, v in ast.iter_fields(node))


def is_proc(node: ast.AST) -> bool:
    folded = fold(node)
    return folded is not None and folded.text.strip("/") == "proc"


def words_of(text: str) -> set[str]:
    word, words = [], set()
    for ch in text + " ":
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word:
            words.add("".join(word))
            word = []
    return words
