"""No import circles in swe_rl: the module graph, built from the syntax tree, has no cycle.

Every import counts (module level and inside functions), except those under `if TYPE_CHECKING:`, which
never run. `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`. A circle
makes the import order matter and hides a seam in the wrong place; break it with a protocol at the seam.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT
from tests.package_sources import parse

PACKAGE = ROOT / "swe_rl"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of `if TYPE_CHECKING:` (their `else:` does run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def runtime_imports(source: str, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of `modules` that `source` (the module `module`) imports when it runs."""
    found: set[str] = set()
    for node in _runtime_nodes(parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {name for name in found if name in modules and name != module}


def import_graph(files: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules it imports at run time, for `files` (module -> (source, is_package))."""
    modules = set(files)
    return {m: runtime_imports(src, m, pkg, modules) for m, (src, pkg) in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def package_files() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in sorted(PACKAGE.rglob("*.py"))}


def test_swe_rl_has_no_runtime_import_cycle():
    files = package_files()
    assert len(files) > 100
    graph = import_graph(files)
    assert sum(len(v) for v in graph.values()) > 200  # the graph is really built
    assert cycles(graph) == []


def test_the_check_sees_a_cycle_and_ignores_type_checking_imports():
    files = {
        "p": ("", True),
        "p.a": ("from p import b\n", False),
        "p.b": ("def f():\n    from .c import x\n", False),
        "p.c": ("import p.a\n", False),
        "p.d": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import y\n", False),
        "p.e": ("from p.d import z\n", False),
    }
    graph = import_graph(files)
    assert graph["p.a"] == {"p.b"} and graph["p.b"] == {"p.c"} and graph["p.d"] == set()
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    files["p.c"] = ("", False)
    assert cycles(import_graph(files)) == []
