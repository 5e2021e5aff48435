"""Which expressions of a module hold a *foreign* object: one reached through a capability, not imported.

Foreign objects come from ``sys.modules`` (by a computed key or as a whole), a computed import,
``gc.get_objects()``, frames (``f_locals``, ``f_globals``, ``inspect.currentframe()``),
``__subclasses__()`` and ``__globals__``; then from what is read off them (attributes, items,
``getattr``, ``.values()``, iteration) and the names bound to them. Writing an attribute of a foreign
object is how code under test patches the runner without naming it (``foreign_patch``).

Names are tracked per function scope (a parameter or a local of one function is not the same name
elsewhere; a module-level name is seen from every function). A function of the module called with a
foreign argument has that parameter foreign (by position, by keyword; a method's ``self``/``cls`` is
skipped). The result of any other call is not foreign: derived data is not the object itself.
"""

from __future__ import annotations

import ast

from swe_rl.grading.scans.capabilities.catalogue import ATTRIBUTE_NAMES, CALLS, NON_LITERAL_CALLS
from swe_rl.grading.scans.capabilities.names import NameTable, fold

__all__ = ["ForeignObjects"]

_SOURCE_CAPABILITIES = frozenset({"gc_objects", "frame_access"})
_PASS_THROUGH_METHODS = frozenset(
    {"values", "items", "get", "copy", "__getitem__", "mro", "pop", "setdefault"}
)
_PASS_THROUGH_CALLS = frozenset(
    {
        "builtins.list",
        "builtins.tuple",
        "builtins.iter",
        "builtins.next",
        "builtins.reversed",
        "builtins.sorted",
    }
    | {"builtins.vars", "builtins.type", "builtins.filter", "builtins.dict", "builtins.set"}
)
_IMPORT_CALLS = frozenset(q for q, capability in NON_LITERAL_CALLS.items() if capability == "computed_import")
_Scope = ast.AST


class ForeignObjects:
    def __init__(self, tree: ast.AST, names: NameTable, nodes: list[ast.AST] | None = None) -> None:
        """`nodes`: ``ast.walk(tree)`` as a list, when the caller has it (the tree is only read)."""
        nodes = list(ast.walk(tree)) if nodes is None else nodes
        self.names = names
        self.module = tree
        self.scope_of: dict[int, _Scope] = {}
        self._scopes(tree, tree)
        self.foreign: set[tuple[int, str]] = set()
        functions: dict[str, list[ast.arguments]] = {}
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.setdefault(node.name, []).append(node.args)
        for _ in range(6):  # to a fixpoint: few rounds in practice
            size = len(self.foreign)
            for node in nodes:
                self._propagate(node, functions)
            if len(self.foreign) == size:
                break

    def _scopes(self, node: ast.AST, scope: _Scope) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
            self.scope_of[id(child)] = inner
            self._scopes(child, inner)

    def _mark(self, target: ast.AST) -> None:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                self.foreign.add((id(self.scope_of.get(id(sub), self.module)), sub.id))

    def _propagate(self, node: ast.AST, functions: dict[str, list[ast.arguments]]) -> None:
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs = [(node.target, node.iter)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs = [(node.optional_vars, node.context_expr)]
        elif isinstance(node, ast.Call):
            self._call(node, functions)
        for target, value in pairs:
            if self.holds(value):
                self._mark(target)

    def _call(self, call: ast.Call, functions: dict[str, list[ast.arguments]]) -> None:
        func = call.func
        name = (
            func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        )
        for args in functions.get(name or "", []):
            positional = [*args.posonlyargs, *args.args]
            if isinstance(func, ast.Attribute) and [a.arg for a in positional[:1]] in (["self"], ["cls"]):
                positional = positional[1:]
            for index, arg in enumerate(call.args):
                if not self.holds(arg):
                    continue
                if index < len(positional) and not isinstance(arg, ast.Starred):
                    self._mark_param(positional[index])
                elif args.vararg:
                    self._mark_param(args.vararg)
            for keyword in call.keywords:
                if keyword.arg and self.holds(keyword.value):
                    for param in [*positional, *args.kwonlyargs]:
                        if param.arg == keyword.arg:
                            self._mark_param(param)

    def _mark_param(self, param: ast.arg) -> None:
        self.foreign.add((id(self.scope_of.get(id(param), self.module)), param.arg))

    def holds(self, node: ast.AST) -> bool:
        """Whether `node` evaluates to a foreign object (see the module docstring)."""
        if isinstance(node, ast.Name):
            if "sys.modules" in self.names.resolve(node):
                return True
            scope = self.scope_of.get(id(node), self.module)
            return (id(scope), node.id) in self.foreign or (id(self.module), node.id) in self.foreign
        if isinstance(node, ast.Attribute):
            if node.attr in ATTRIBUTE_NAMES or node.attr == "__subclasses__":
                return True
            if "sys.modules" in self.names.resolve(node):
                return True
            return self.holds(node.value)
        if isinstance(node, (ast.Subscript, ast.Starred)):
            return self.holds(node.value)
        if isinstance(node, ast.Call):
            return self._call_holds(node)
        if isinstance(node, ast.BoolOp):
            return any(self.holds(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.holds(node.body) or self.holds(node.orelse)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(self.holds(e) for e in node.elts)
        return False

    def _call_holds(self, node: ast.Call) -> bool:
        funcs = self.names.resolve(node.func)
        if any(CALLS.get(q) in _SOURCE_CAPABILITIES for q in funcs):
            return True
        if funcs & _IMPORT_CALLS and not (node.args and fold(node.args[0])):
            return True
        if funcs & ({"builtins.getattr"} | _PASS_THROUGH_CALLS) and node.args:
            return self.holds(node.args[0])
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _PASS_THROUGH_METHODS | {"__subclasses__"}:
            return func.attr == "__subclasses__" or self.holds(func.value)
        return False
