"""What a name or an expression of a module stands for: aliases, literal lookups and strings built from pieces.

The capability scan judges qualified names (``sys.modules``), whatever spelling reached them:
``import sys as s``, ``from sys import modules as m``, ``m = sys``, ``getattr(sys, "modules")``,
``sys.modules["os"]``, ``importlib.import_module("sys")``, ``vars(sys)["modules"]``, a parameter
defaulting to ``sys``. Bindings are collected over the whole file, flow-insensitively: a name bound in
two places stands for both. A name that is never bound and spells a standard module (a fragment of
a file, or a star import) stands for that module. Strings are folded when every piece is a constant
(``"_py" + "test"``, ``"".join([...])``, ``chr(95)``, ``b"..".decode()``, ``s[::-1]``).
"""

from __future__ import annotations

import ast
import builtins

from swe_rl.grading.scans.capabilities.catalogue import SENSITIVE_MODULES

__all__ = ["Folded", "NameTable", "fold"]

_FALLBACK_MODULES = SENSITIVE_MODULES | {
    "io",
    "threading",
    "traceback",
    "weakref",
    "runpy",
    "imp",
    "zipimport",
    "pathlib",
    "codecs",
    "base64",
}
_BUILTIN_NAMES = frozenset(dir(builtins))
_IMPORT_CALLS = frozenset({"importlib.import_module", "builtins.__import__", "importlib.__import__"})


class Folded:
    """A string computed from constant pieces: its text, and whether it was disguised."""

    def __init__(self, text: str, pieces: list[str], disguised: bool) -> None:
        self.text = text
        self.pieces = pieces
        """The literal pieces it was built from (empty for a plain literal)."""
        self.disguised = disguised
        """Built through chr, bytes, reversal or decoding: no piece can be read as written."""


def fold(node: ast.AST) -> Folded | None:
    """The string `node` evaluates to when it is built from constants only, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return Folded(node.value, [], False)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = fold(node.left), fold(node.right)
        if left and right:
            return _join([left, right], "")
    if isinstance(node, ast.JoinedStr):
        parts = [fold(v) for v in node.values]
        if all(parts):
            return _join([p for p in parts if p], "")
    if isinstance(node, ast.FormattedValue):
        return fold(node.value)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        inner = fold(node.value)
        s = node.slice
        if inner and not s.lower and not s.upper and _int(s.step) == -1:
            return Folded(inner.text[::-1], inner.pieces, True)
    if isinstance(node, ast.Call):
        return _fold_call(node)
    return None


def _fold_call(node: ast.Call) -> Folded | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "chr" and len(node.args) == 1:
        code = _int(node.args[0])
        return Folded(chr(code), [], True) if code is not None and 0 <= code < 0x110000 else None
    if isinstance(func, ast.Attribute) and func.attr == "join" and len(node.args) == 1:
        sep = fold(func.value)
        items = _fold_items(node.args[0])
        if sep is not None and items is not None:
            return _join(items, sep.text)
    if isinstance(func, ast.Attribute) and func.attr == "decode":
        raw = _bytes(func.value)
        if raw is not None:
            try:
                return Folded(raw.decode(), [], True)
            except UnicodeDecodeError:
                return None
    return None


def _fold_items(node: ast.AST) -> list[Folded] | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [fold(e) for e in node.elts]
        return [i for i in items if i] if all(items) else None
    if (  # map(chr, [95, 112, ...])
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "map"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "chr"
        and isinstance(node.args[1], (ast.List, ast.Tuple))
    ):
        codes = [_int(e) for e in node.args[1].elts]
        if all(c is not None and 0 <= c < 0x110000 for c in codes):
            return [Folded(chr(c), [], True) for c in codes if c is not None]
    return None


def _bytes(node: ast.AST) -> bytes | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"bytes", "bytearray"}
    ):
        if len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
            codes = [_int(e) for e in node.args[0].elts]
            if all(c is not None and 0 <= c < 256 for c in codes):
                return bytes(c for c in codes if c is not None)
    return None


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand)
        return -inner if inner is not None else None
    return None


def _join(parts: list[Folded], sep: str) -> Folded:
    pieces = [piece for p in parts for piece in (p.pieces or [p.text])]
    return Folded(sep.join(p.text for p in parts), pieces, any(p.disguised for p in parts))


class NameTable:
    """Qualified names each expression of one module may stand for."""

    def __init__(self, tree: ast.AST, nodes: list[ast.AST] | None = None) -> None:
        """`nodes`: ``ast.walk(tree)`` as a list, when the caller has it (the tree is only read)."""
        nodes = list(ast.walk(tree)) if nodes is None else nodes
        self.bindings: dict[str, set[str]] = {}
        self.star_modules: set[str] = set()
        self.imported = {  # names bound by an import statement, relative ones included
            alias.asname or alias.name.split(".")[0]
            for node in nodes
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        """Names bound by an import statement (relative imports included)."""
        for _ in range(4):  # assignments of assignments: a few rounds reach a fixpoint in practice
            before = {k: set(v) for k, v in self.bindings.items()}
            self._collect(nodes)
            if before == self.bindings:
                break

    def _bind(self, name: str, qualnames: set[str]) -> None:
        if qualnames:
            self.bindings.setdefault(name, set()).update(qualnames)

    def _collect(self, nodes: list[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._bind(alias.asname, {alias.name})
                    else:
                        self._bind(alias.name.split(".")[0], {alias.name.split(".")[0]})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        self.star_modules.add(node.module)
                    else:
                        self._bind(alias.asname or alias.name, {f"{node.module}.{alias.name}"})
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._bind_target(target, node.value)
            elif isinstance(node, ast.For) and isinstance(node.iter, (ast.List, ast.Tuple, ast.Set)):
                for elt in node.iter.elts:
                    self._bind_target(node.target, elt)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._bind_target(node.optional_vars, node.context_expr)
            elif isinstance(node, ast.arguments):
                positional = node.posonlyargs + node.args
                for arg, default in zip(positional[len(positional) - len(node.defaults) :], node.defaults):
                    self._bind(arg.arg, self.resolve(default))
                for arg, kw_default in zip(node.kwonlyargs, node.kw_defaults):
                    if kw_default is not None:
                        self._bind(arg.arg, self.resolve(kw_default))

    def _bind_target(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, self.resolve(value))
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            for t, v in zip(target.elts, value.elts):
                self._bind_target(t, v)

    def resolve(self, node: ast.AST) -> set[str]:
        """Qualified names `node` may stand for (``{"sys.modules"}``); empty when unknown."""
        if isinstance(node, ast.Name):
            if node.id in self.bindings:
                return self.bindings[node.id]
            if node.id == "__builtins__":
                return {"builtins"}
            if node.id in _FALLBACK_MODULES:
                return {node.id}
            if node.id in _BUILTIN_NAMES:
                return {f"builtins.{node.id}"}
            return {f"{m}.{node.id}" for m in self.star_modules}
        if isinstance(node, ast.Attribute):
            return {f"{q}.{node.attr}" for q in self.resolve(node.value)}
        if isinstance(node, ast.Subscript):
            key = fold(node.slice)
            if key is None:
                return set()
            out = set()
            for q in self.resolve(node.value):
                if q == "sys.modules":
                    out.add(key.text)
                elif q == "builtins":  # __builtins__["exec"]
                    out.add(f"builtins.{key.text}")
                elif q.endswith(".__dict__"):
                    out.add(f"{q[: -len('.__dict__')]}.{key.text}")
            return out
        if isinstance(node, ast.Call):
            return self._resolve_call(node)
        return set()

    def _resolve_call(self, node: ast.Call) -> set[str]:
        funcs = self.resolve(node.func)
        args = node.args
        if funcs & {"builtins.getattr"} and len(args) >= 2:
            name = fold(args[1])
            return {f"{q}.{name.text}" for q in self.resolve(args[0])} if name else set()
        if funcs & {"builtins.vars"} and len(args) == 1:
            return {f"{q}.__dict__" for q in self.resolve(args[0])}
        if funcs & _IMPORT_CALLS and args:
            name = fold(args[0])
            return {name.text} if name else set()
        if args and any(q == "sys.modules.get" for q in funcs):
            name = fold(args[0])
            return {name.text} if name else set()
        return set()
