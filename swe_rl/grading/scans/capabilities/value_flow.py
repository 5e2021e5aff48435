"""Values followed through variables for the Go, JavaScript and Rust scans (`other_languages`).

A spelling-based scan sees ``exec.Command(os.Args[0])`` but not ``args := os.Args; exec.Command(args[0])``,
nor ``require('node:' + 'assert')``. Here a simple flow over the tree-sitter tree follows values: a name
bound (declared or assigned) to an expression that holds a source or an already followed name
is followed, per outermost function (names bound at the top level are followed everywhere); a sink whose
arguments hold one is a site. What cannot be resolved is treated as the worst
it could be:

- **binary path -> spawn** (``rerun_binary``): sources are Go's ``os.Args`` and ``os.Executable``, Rust's
  ``env::args``/``args_os``/``current_exe``, JavaScript's ``process.argv``/``argv0``/``execPath``
  (``process`` itself followed through aliases and destructuring); sinks are the process spawns
  (``exec.Command``, ``syscall.Exec``, ``os.StartProcess``, ``exec.Cmd{Path: ...}``, ``cmd.Path = ...``;
  ``Command::new``, ``execv``; ``child_process``'s ``spawn``/``execFile``/``fork``/``exec``);
- **a module loaded by any require** (``assert_patch``): every call of a loader — ``require``,
  ``module.require``, ``x.require``, a name bound to ``require``/``createRequire(...)``, ``require.call``,
  ``(0, require)``, ``import()`` — with a name that resolves (string literals, ``+`` of them, constants
  bound to them, templates without substitutions) to an assertion or loader module, or that does not
  resolve at all, binds its names; a write to a property of any of them (assignment,
  ``Object.assign``/``defineProperty``/``Reflect.set``) is a site.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["go_flow", "javascript_flow", "rust_flow"]

_SPACE = re.compile(r"\s+")
AddSite = Callable[[Any, str, str], None]


def walk_tree(node: Any) -> Iterator[Any]:
    """Every node under `node` (itself first), in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def node_text(node: Any) -> str:
    """A node's source text ('' for none)."""
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def _flat(node: Any) -> str:
    return _SPACE.sub("", node_text(node))


def _identifiers(node: Any) -> set[str]:
    if node is None:
        return set()
    kinds = {"identifier", "shorthand_property_identifier_pattern", "shorthand_property_identifier"}
    return {node_text(n) for n in walk_tree(node) if n.type in kinds}


def _holds(node: Any, followed: set[str], source: re.Pattern[str]) -> bool:
    """`node` holds a source spelling or a followed name (as an identifier, not inside a string)."""
    return bool(source.search(_flat(node))) or bool(_identifiers(node) & followed)


def _follow(
    bindings: list[tuple[Any, Any]], followed: set[str], holds: Callable[[Any, set[str]], bool]
) -> set[str]:
    """`followed` grown by the names bound (left, right) to a value that holds a source or a followed
    name, to a fixed point."""
    changed = True
    while changed:
        changed = False
        for left, right in bindings:
            if right is not None and holds(right, followed):
                new = _identifiers(left) - followed - {"_"}
                if new:
                    followed |= new
                    changed = True
    return followed


_FUNCTIONS = frozenset(
    {
        "function_declaration", "method_declaration", "func_literal", "function_item", "closure_expression",
        "function_expression", "arrow_function", "function", "method_definition", "generator_function",
        "generator_function_declaration",
    }
)  # fmt: skip


def _outermost_function(node: Any) -> Any:
    found, current = None, node.parent
    while current is not None:
        if current.type in _FUNCTIONS:
            found = current
        current = current.parent
    return found


class _Scopes:
    """Names followed per outermost function (a closure shares its function's), over the names followed
    at the top level: a name bound to the binary's path in one function is not followed in another."""

    def __init__(
        self, bindings: list[tuple[Any, Any]], seed: set[str], holds: Callable[[Any, set[str]], bool]
    ) -> None:
        by_scope: dict[Any, list[tuple[Any, Any]]] = {}
        for left, right in bindings:
            by_scope.setdefault(_key(_outermost_function(left)), []).append((left, right))
        self.top = _follow(by_scope.pop(None, []), set(seed), holds)
        self.scopes = {k: _follow(v, set(self.top), holds) for k, v in by_scope.items()}

    def at(self, node: Any) -> set[str]:
        return self.scopes.get(_key(_outermost_function(node)), self.top)


def _key(node: Any) -> Any:
    return None if node is None else (node.start_byte, node.end_byte)


# ---------------------------------------------------------------- Go
_GO_SOURCE = re.compile(r"\bos\.(?:Args\b(?!\[[1-9])|Executable\()")  # os.Args[1:] is the arguments only
_GO_SPAWN = re.compile(r"^(?:exec\.Command(?:Context)?|syscall\.(?:Exec|ForkExec)|os\.StartProcess)$")


def go_flow(root: Any, add: AddSite) -> None:
    bindings = []
    for node in walk_tree(root):
        if node.type in {"short_var_declaration", "assignment_statement"}:
            bindings.append((node.child_by_field_name("left"), node.child_by_field_name("right")))
        elif node.type == "var_spec":
            names = [c for c in node.named_children if c.type == "identifier"]
            bindings += [(n, node.child_by_field_name("value")) for n in names]
    scopes = _Scopes(bindings, set(), lambda n, f: _holds(n, f, _GO_SOURCE))
    for node in walk_tree(root):
        followed = (
            scopes.at(node)
            if node.type in {"call_expression", "keyed_element", "assignment_statement"}
            else set()
        )
        if node.type == "call_expression" and _GO_SPAWN.match(_flat(node.child_by_field_name("function"))):
            args = node.child_by_field_name("arguments")
            if args is not None and _holds(args, followed, _GO_SOURCE):
                add(
                    node,
                    "rerun_binary",
                    f"the test binary's path reaches {_flat(node.child_by_field_name('function'))}",
                )
        elif node.type == "keyed_element" and re.match(r"^Path:", _flat(node)):
            if _holds(node, followed, _GO_SOURCE) and "exec.Cmd" in _flat(
                node.parent.parent if node.parent else None
            ):
                add(node, "rerun_binary", "the test binary's path reaches exec.Cmd{Path: ...}")
        elif node.type == "assignment_statement" and re.search(
            r"\.Path$", _flat(node.child_by_field_name("left"))
        ):
            if _holds(node.child_by_field_name("right"), followed, _GO_SOURCE):
                add(node, "rerun_binary", "the test binary's path is assigned to a command's Path")


# ---------------------------------------------------------------- Rust
_RUST_SOURCE = re.compile(
    r"(?:^|[^\w.])(?:(?:std::)?env::)?(?:args|args_os|current_exe)\(\)(?!\.skip\([1-9])"
)
_RUST_SPAWN = re.compile(r"(?:^|::)(?:Command::new|execv[pe]?|execvpe)$")


def rust_flow(root: Any, add: AddSite) -> None:
    uses_env = bool(
        re.search(
            r"\benv::(?:args|args_os|current_exe)\b|\benv::\{[^}]*\b(?:args|current_exe)", node_text(root)
        )
    )
    source = _RUST_SOURCE if uses_env else re.compile(r"\benv::(?:args|args_os|current_exe)\(\)")
    bindings = [
        (n.child_by_field_name("pattern"), n.child_by_field_name("value"))
        for n in walk_tree(root)
        if n.type == "let_declaration"
    ]
    bindings += [
        (n.child_by_field_name("left"), n.child_by_field_name("right"))
        for n in walk_tree(root)
        if n.type == "assignment_expression"
    ]
    scopes = _Scopes(bindings, set(), lambda n, f: _holds(n, f, source))
    for node in walk_tree(root):
        if node.type == "call_expression":
            fn = _flat(node.child_by_field_name("function"))
            args = node.child_by_field_name("arguments")
            if _RUST_SPAWN.search(fn) and args is not None and _holds(args, scopes.at(node), source):
                add(node, "rerun_binary", f"the test binary's path reaches {fn}")


# ---------------------------------------------------------------- JavaScript
_PROCESS = re.compile(
    r"^(?:process|globalThis\.process|global\.process|require\(['\"`](?:node:)?process['\"`]\))$"
)
_JS_SPAWNS = {"spawn", "spawnSync", "execFile", "execFileSync", "fork", "exec", "execSync"}
_ASSERTION_MODULES = re.compile(r"^(?:node:)?(?:assert|assert/strict|module|chai|expect|node:test|test)$")
_ASSERTION_WORDS = re.compile(
    r"\.(?:ok|equal|strictEqual|deepEqual|deepStrictEqual|notEqual|notStrictEqual|throws|rejects|fail|match|"
    r"assert|expect|AssertionError|partialDeepStrictEqual|toBe|toEqual|toStrictEqual)\b"
)
_FUNCTION_NODES = {"arrow_function", "function_expression", "function"}
_WRITERS = {
    "Object.assign",
    "Object.defineProperty",
    "Object.defineProperties",
    "Reflect.set",
    "Reflect.defineProperty",
}


def _js_string(node: Any, constants: dict[str, str]) -> str | None:
    """The value of a string expression made of literals, ``+`` and constants; None if it is computed."""
    if node is None:
        return None
    if node.type == "string":
        return node_text(node)[1:-1]
    if node.type == "template_string":
        return (
            None if any(c.type == "template_substitution" for c in node.children) else node_text(node)[1:-1]
        )
    if node.type == "parenthesized_expression" and node.named_children:
        return _js_string(node.named_children[-1], constants)
    if node.type == "binary_expression" and node_text(node.child_by_field_name("operator")) == "+":
        left = _js_string(node.child_by_field_name("left"), constants)
        right = _js_string(node.child_by_field_name("right"), constants)
        return None if left is None or right is None else left + right
    if node.type == "identifier":
        return constants.get(node_text(node))
    return None


def _declarations(root: Any) -> list[tuple[Any, Any]]:
    out = []
    for node in walk_tree(root):
        if node.type == "variable_declarator":
            out.append((node.child_by_field_name("name"), node.child_by_field_name("value")))
        elif node.type == "assignment_expression":
            out.append((node.child_by_field_name("left"), node.child_by_field_name("right")))
    return [(left, right) for left, right in out if left is not None and left.type != "member_expression"]


def _loader_names(bindings: list[tuple[Any, Any]]) -> set[str]:
    """Names bound to a module loader: ``require`` itself, ``module.require``, ``createRequire(...)``."""
    names: set[str] = set()
    for left, right in bindings:
        value = _flat(right)
        if left.type == "identifier" and (
            re.match(r"^(?:require|module\.require|\w+\.require)(?:\.bind\(.*\))?$", value)
            or re.search(r"\bcreateRequire\([^()]*\)$", value)
        ):
            names.add(node_text(left))
    return names


def _loaded(call: Any, loaders: set[str], constants: dict[str, str]) -> tuple[bool, str | None]:
    """(is `call` a module load, the module's name or None when computed)."""
    fn = call.child_by_field_name("function")
    args = call.child_by_field_name("arguments")
    named = list(args.named_children) if args is not None else []
    callee = _flat(fn)
    if callee.endswith((".call", ".apply")) and re.search(r"(?:^|\.)require$", callee[: callee.rfind(".")]):
        named = named[1:]
    elif not (
        callee in loaders
        or callee in ("require", "import")
        or re.search(r"\.require$", callee)
        or re.match(r"^\(.*,require\)$", callee)
        or (
            fn is not None
            and fn.type == "call_expression"
            and re.search(r"createRequire$", _flat(fn.child_by_field_name("function")))
        )
    ):
        return False, None
    if not named:
        return False, None
    return True, _js_string(named[0], constants)


def _bound_to(call: Any) -> Any:
    """The declarator or assignment a loaded module's value goes to (through ``await``, ``.x``, parens)."""
    node = call
    while node.parent is not None and node.parent.type in {
        "await_expression",
        "member_expression",
        "parenthesized_expression",
    }:
        node = node.parent
    parent = node.parent
    if parent is not None and parent.type in {"variable_declarator", "assignment_expression"}:
        return parent.child_by_field_name("name") or parent.child_by_field_name("left")
    return node if node is not call else call


def javascript_flow(root: Any, add: AddSite) -> None:
    bindings = _declarations(root)
    constants: dict[str, str] = {}
    for _ in range(3):
        for left, right in bindings:
            if left.type == "identifier" and (value := _js_string(right, constants)) is not None:
                constants[node_text(left)] = value
    _binary_path(root, bindings, add)
    loaders = _loader_names(bindings)
    modules: set[str] = set()  # assertion or loader modules
    unknown: set[str] = set()  # modules whose name does not resolve
    written: list[Any] = []  # loads used directly: ``require(x).equal = ...``
    for node in walk_tree(root):
        if node.type != "call_expression":
            continue
        is_load, name = _loaded(node, loaders, constants)
        if not is_load or (name is not None and not _ASSERTION_MODULES.match(name)):
            continue
        target = _bound_to(node)
        if target is not None and target.type in {"identifier", "object_pattern", "array_pattern"}:
            (modules if name is not None else unknown).update(_identifiers(target))
        else:
            written.append(node)
    modules = _follow(bindings, modules, lambda n, f: n.type == "identifier" and node_text(n) in f)
    unknown = _follow(bindings, unknown, lambda n, f: n.type == "identifier" and node_text(n) in f) - modules
    for node in walk_tree(root):
        if node.type in {"assignment_expression", "augmented_assignment_expression"}:
            left = node.child_by_field_name("left")
            if left is None or left.type not in {"member_expression", "subscript_expression"}:
                continue
            base = left
            while base.type in {"member_expression", "subscript_expression"}:
                base = base.child_by_field_name("object")
            name = node_text(base) if base.type == "identifier" else ""
            suspicious = name in unknown and (
                _ASSERTION_WORDS.search(_flat(left))
                or (node.child_by_field_name("right") or left).type in _FUNCTION_NODES
            )
            if name in modules or suspicious or any(w in list(walk_tree(left)) for w in written):
                add(node, "assert_patch", f"assigns {_flat(left)[:50]} of a module loaded by a require")
        elif node.type == "call_expression" and _flat(node.child_by_field_name("function")) in _WRITERS:
            args = node.child_by_field_name("arguments")
            first = args.named_children[0] if args is not None and args.named_children else None
            if first is not None and (
                _identifiers(first) & (modules | unknown)
                if first.type != "call_expression"
                else first in written
            ):
                add(
                    node,
                    "assert_patch",
                    f"{_flat(node.child_by_field_name('function'))} on a module loaded by a require",
                )


def _binary_path(root: Any, bindings: list[tuple[Any, Any]], add: AddSite) -> None:
    aliases = {"process"}
    aliases = _follow(
        bindings,
        aliases,
        lambda n, f: bool(_PROCESS.match(_flat(n))) or (n.type == "identifier" and node_text(n) in f),
    )
    # destructuring the process object follows the binary's path out of it
    source_names: set[str] = set()
    for left, right in bindings:
        if left.type == "object_pattern" and _flat(right) in aliases | {
            "globalThis.process",
            "global.process",
        }:
            for child in left.named_children:
                key = child.child_by_field_name("key") if child.type == "pair_pattern" else child
                if node_text(key) in {"argv", "argv0", "execPath"}:
                    value = child.child_by_field_name("value") if child.type == "pair_pattern" else child
                    source_names |= _identifiers(value)
    alias_re = "|".join(re.escape(a) for a in sorted(aliases))
    # process.argv.slice(2) is the arguments only
    source = re.compile(
        rf"(?:^|[^\w.])(?:{alias_re})\.(?:argv(?!\.slice\([2-9])(?!\[[2-9])|argv0|execPath)\b"
    )
    scopes = _Scopes(bindings, source_names, lambda n, f: _holds(n, f, source))
    spawn_module = bool(re.search(r"child_process", node_text(root)))
    spawns = set(_JS_SPAWNS)  # and the names they are bound to (``const {spawnSync: run} = ...``)
    for left, right in bindings:
        if left.type == "object_pattern":
            for child in left.named_children:
                key, value = child.child_by_field_name("key"), child.child_by_field_name("value")
                if child.type == "pair_pattern" and node_text(key) in _JS_SPAWNS and value is not None:
                    spawns |= _identifiers(value)
        elif left.type == "identifier" and _flat(right).rsplit(".", 1)[-1] in _JS_SPAWNS - {
            "exec",
            "execSync",
        }:
            spawns.add(node_text(left))
    for node in walk_tree(root):
        if node.type != "call_expression":
            continue
        fn = _flat(node.child_by_field_name("function"))
        last = fn.rsplit(".", 1)[-1]
        if last not in spawns or (last in {"exec", "execSync"} and not spawn_module):
            continue
        args = node.child_by_field_name("arguments")
        if args is not None and _holds(args, scopes.at(node), source):
            add(node, "rerun_binary", f"the test binary's path reaches {fn[:40]}")
