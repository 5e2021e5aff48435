"""Write the list of command-line flags the pinned slime accepts (``tests/data/slime_flags.txt``).

slime parses its command line with three parsers, and our launch scripts must only pass flags one
of them defines (Megatron's parser is run with ``ignore_unknown_args``, so a misspelt flag would be
dropped silently):

* slime's own arguments (``slime/utils/arguments.py``, ``slime/backends/sglang_utils/arguments.py``);
* Megatron-LM's ``megatron/training/arguments.py`` at the commit slime's Dockerfile pins — literal
  ``add_argument`` calls plus the flags ``ArgumentGroupFactory`` derives from config dataclasses
  (``TransformerConfig``, ``TrainingConfig``, ...), and the flags slime's Megatron patch adds;
* SGLang's ``ServerArgs`` (the version slime's Dockerfile pins), each prefixed ``--sglang-`` the
  way slime registers them, minus the ones slime skips.

Everything is read with ``ast`` from source checkouts (nothing is imported or executed), so the
generator runs on any machine without torch. Usage::

    git clone https://github.com/THUDM/slime && git -C slime checkout <slime pin>
    git clone https://github.com/NVIDIA/Megatron-LM && git -C Megatron-LM checkout <megatron pin>
    pip download sglang==<version> --no-deps -d /tmp/sgl && unzip -q /tmp/sgl/*.whl -d /tmp/sgl
    python tests/tools/gen_slime_flags.py --slime slime --megatron Megatron-LM --sglang /tmp/sgl \
        > tests/data/slime_flags.txt

The SGLang router's own flags (``--router-*``) are not listed; the scripts do not use them.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

SLIME_FILES = ["slime/utils/arguments.py", "slime/backends/sglang_utils/arguments.py"]
MEGATRON_ARGS = "megatron/training/arguments.py"
MEGATRON_CONFIG_FILES = [
    "megatron/core/model_parallel_config.py",
    "megatron/core/transformer/transformer_config.py",
    "megatron/training/training_config.py",
    "megatron/training/common_config.py",
    "megatron/training/resilience_config.py",
]
SLIME_MEGATRON_PATCH = "docker/patch/latest/megatron.patch"
SGLANG_SERVER_ARGS = "sglang/srt/server_args.py"


def literal_flags(tree: ast.AST, functions: tuple[str, ...] = ("add_argument", "reset_arg")) -> set[str]:
    """Every ``"--flag"`` string given to ``*.add_argument(...)`` / ``reset_arg(...)``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name not in functions:
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                out.add(arg.value)
    return out


# --------------------------------------------------------------------------- Megatron dataclasses


def _field_call(value: ast.expr | None) -> ast.Call | None:
    if (
        isinstance(value, ast.Call)
        and getattr(value.func, "id", getattr(value.func, "attr", None)) == "field"
    ):
        return value
    return None


def _is_bool(annotation: ast.expr) -> bool:
    text = ast.unparse(annotation).replace(" ", "")
    return text in {
        "bool",
        "Optional[bool]",
        "bool|None",
        "None|bool",
        "Union[bool,None]",
        "typing.Optional[bool]",
    }


def _default(value: ast.expr | None) -> object:
    call = _field_call(value)
    if call is not None:
        for kw in call.keywords:
            if kw.arg == "default" and isinstance(kw.value, ast.Constant):
                return kw.value.value
        return ...  # default_factory or no default: not a bool default
    if isinstance(value, ast.Constant):
        return value.value
    return ...


def _meta_arg_names(value: ast.expr | None) -> list[str] | None:
    call = _field_call(value)
    if call is None:
        return None
    for kw in call.keywords:
        if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values):
                if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                    for k2, v2 in zip(v.keys, v.values):
                        if isinstance(k2, ast.Constant) and k2.value == "arg_names":
                            return [e.value for e in v2.elts if isinstance(e, ast.Constant)]
    return None


def _init_false(value: ast.expr | None) -> bool:
    call = _field_call(value)
    return call is not None and any(
        kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
        for kw in call.keywords
    )


def dataclass_index(files: list[Path]) -> dict[str, ast.ClassDef]:
    index: dict[str, ast.ClassDef] = {}
    for path in files:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                index[node.name] = node
    return index


def dataclass_flags(name: str, index: dict[str, ast.ClassDef], exclude: set[str]) -> set[str]:
    """The flags ``ArgumentGroupFactory(<name>, exclude=...)`` registers (its naming rules, read statically)."""
    cls = index[name]
    fields: dict[str, ast.AnnAssign] = {}
    for base in cls.bases:  # inherited fields first, like dataclasses.fields()
        base_name = getattr(base, "id", None)
        if base_name in index:
            for stmt in _fields_of(base_name, index):
                fields[stmt.target.id] = stmt
    for stmt in _own_fields(cls):
        fields[stmt.target.id] = stmt
    out: set[str] = set()
    for field_name, stmt in fields.items():
        if field_name in exclude or _init_false(stmt.value):
            continue
        names = ["--" + field_name.replace("_", "-")]
        if _is_bool(stmt.annotation) and _default(stmt.value) is not False:
            names = ["--no-" + field_name.replace("_", "-"), "--disable-" + field_name.replace("_", "-")]
        out.update(_meta_arg_names(stmt.value) or names)
    return out


def _own_fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    return [
        s
        for s in cls.body
        if isinstance(s, ast.AnnAssign)
        and isinstance(s.target, ast.Name)
        and not ast.unparse(s.annotation).startswith(("ClassVar", "typing.ClassVar", "InitVar"))
    ]


def _fields_of(name: str, index: dict[str, ast.ClassDef]) -> list[ast.AnnAssign]:
    cls = index[name]
    out: list[ast.AnnAssign] = []
    for base in cls.bases:
        if getattr(base, "id", None) in index:
            out += _fields_of(base.id, index)
    return out + _own_fields(cls)


def factory_calls(tree: ast.Module) -> list[tuple[str, set[str]]]:
    """``ArgumentGroupFactory(Cls, exclude=...)`` calls: the class name and its exclude list."""
    out = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        lists = {
            t.id: node.value
            for node in ast.walk(func)
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name) and isinstance(node.value, ast.List)
        }
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ArgumentGroupFactory":
                exclude: set[str] = set()
                for kw in node.keywords:
                    if kw.arg == "exclude":
                        lst = lists.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
                        exclude = {e.value for e in lst.elts if isinstance(e, ast.Constant)}
                out.append((node.args[0].id, exclude))
    return out


def megatron_flags(megatron: Path, slime: Path) -> set[str]:
    tree = ast.parse((megatron / MEGATRON_ARGS).read_text())
    flags = literal_flags(tree, ("add_argument",))
    index = dataclass_index([megatron / f for f in MEGATRON_CONFIG_FILES])
    for cls_name, exclude in factory_calls(tree):
        flags |= dataclass_flags(cls_name, index, exclude)
    patch = slime / SLIME_MEGATRON_PATCH
    if patch.exists():  # flags slime's Megatron patch adds
        flags |= set(
            re.findall(r"^\+\s*\w+\.add_argument\(\s*['\"](--[\w-]+)['\"]", patch.read_text(), re.MULTILINE)
        )
    return flags


# --------------------------------------------------------------------------- SGLang


def _slime_sglang_skips(slime: Path) -> set[str]:
    tree = ast.parse((slime / "slime/backends/sglang_utils/arguments.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "skipped_args" for t in node.targets
        ):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    raise SystemExit("skipped_args not found in slime's sglang arguments")


def sglang_flags(sglang: Path, slime: Path) -> set[str]:
    """ServerArgs flags as slime registers them: ``--sglang-<flag>``, minus slime's skipped fields."""
    tree = ast.parse((sglang / SGLANG_SERVER_ARGS).read_text())
    skipped = _slime_sglang_skips(slime)
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    flags: set[str] = set()
    for stmt in _own_fields(server_args):
        ann = stmt.annotation
        if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) in ("A", "Annotated")):
            continue  # no Arg: not on the command line
        parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        arg = next(
            (p for p in parts[1:] if isinstance(p, ast.Call) and getattr(p.func, "id", None) == "Arg"), None
        )
        kws = {kw.arg: kw.value for kw in arg.keywords} if arg else {}
        if isinstance(kws.get("no_cli"), ast.Constant) and kws["no_cli"].value:
            continue
        if stmt.target.id in skipped:
            continue
        names = (
            [kws["cli_name"].value]
            if isinstance(kws.get("cli_name"), ast.Constant)
            else ["--" + stmt.target.id.replace("_", "-")]
        )
        if isinstance(kws.get("aliases"), (ast.List, ast.Tuple)):
            names += [e.value for e in kws["aliases"].elts if isinstance(e, ast.Constant)]
        flags.update("--sglang-" + n.lstrip("-") for n in names if n.startswith("-"))
    for node in ast.walk(server_args):  # the hand-registered ones in add_cli_args
        if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "add_argument":
                    dest = next(
                        (
                            kw.value.value
                            for kw in call.keywords
                            if kw.arg == "dest" and isinstance(kw.value, ast.Constant)
                        ),
                        None,
                    )
                    strs = [
                        a.value
                        for a in call.args
                        if isinstance(a, ast.Constant) and str(a.value).startswith("--")
                    ]
                    if not strs or (dest or strs[0][2:].replace("-", "_")) in skipped:
                        continue
                    flags.update("--sglang-" + s[2:] for s in strs)
    return flags


def _commit(path: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slime", type=Path, required=True, help="slime checkout at the pinned commit")
    p.add_argument(
        "--megatron", type=Path, required=True, help="Megatron-LM checkout at slime's pinned commit"
    )
    p.add_argument("--sglang", type=Path, required=True, help="directory holding sglang/srt/server_args.py")
    p.add_argument("--sglang-version", default="unknown", help="recorded in the header")
    a = p.parse_args(argv)
    slime_set: set[str] = set()
    for f in SLIME_FILES:
        slime_set |= literal_flags(ast.parse((a.slime / f).read_text()))
    flags = slime_set | megatron_flags(a.megatron, a.slime) | sglang_flags(a.sglang, a.slime)
    out = sys.stdout
    out.write(
        "# Flags accepted by slime's train.py / train_async.py, generated by tests/tools/gen_slime_flags.py\n"
    )
    out.write(f"# slime {_commit(a.slime)}; Megatron-LM {_commit(a.megatron)}; sglang {a.sglang_version}\n")
    for flag in sorted(flags):
        out.write(flag + "\n")


if __name__ == "__main__":
    main()
