"""Names of a Python test file's twins and helpers, made of the file's own words (`swe_rl.grading.twins.python`).

A twin's name is its original's words in another order with at most one more word of the file's own, in
the file's style; the helpers (sentinel class, exception, null context) get CamelCase names of the file's
words. Nothing in a name tells a twin from the file's tests (docs/reward_integrity.md, "Twins").
"""

from __future__ import annotations

import ast
import functools
import random
import re
import string

from swe_rl.grading.twins.forms import FileNames

__all__ = ["file_names", "twin_name"]


def _words(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return [w.lower() for w in re.split(r"[_\W]+", spaced) if w.isalpha() and len(w) > 1]


@functools.lru_cache(maxsize=8)
def _vocabulary(tree: ast.Module) -> tuple[list[str], set[str]]:
    """(words of the file's test names and of the names its tests use, every name defined in the file)."""
    words: list[str] = []
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
            if node.name.lower().startswith("test"):
                words += _words(node.name)[1:] if not isinstance(node, ast.ClassDef) else _words(node.name)
        elif isinstance(node, ast.Name):
            defined.add(node.id)
            if len(node.id) > 2:
                words += _words(node.id)
        elif isinstance(node, ast.Attribute) and len(node.attr) > 2:
            words += _words(node.attr)
    words = [w for w in words if w not in {"self", "test", "tests", "assert", "true", "false", "none"}]
    return words or ["case", "value", "result"], defined


def twin_name(original: str, tree: ast.Module, taken: set[str], rng: random.Random) -> str:
    """A test name in the file's own style (``test_a_b`` or ``testAB``): the original's words in another
    order, with at most one more word of the file's own (so a forger that rewrites only tests named
    like the task's rewrites the twin too), unlike any name the file defines and never another test's
    name with words added."""
    words, defined = _vocabulary(tree)
    return _compose(original, words, {*defined, *taken}, taken, rng)


def _compose(original: str, words: list[str], existing: set[str], taken: set[str], rng: random.Random) -> str:
    own = _words(original)
    prefix = re.match(r"_*test_?", original, re.I)
    head = prefix.group(0) if prefix else ""
    own = own[1:] if head and own and own[0] == "test" else own
    own = own or ["case"]
    camel = "_" not in original.strip("_")
    tests = [d for d in existing if d.lower().startswith("test") or not head]
    for attempt in range(64):
        picked = list(own)
        rng.shuffle(picked)
        if len(own) < 2 or attempt >= 8 or rng.random() < 0.5:
            picked.insert(rng.randint(0, len(picked)), rng.choice(words))
        tail = "".join(w.capitalize() for w in picked) if camel else "_".join(picked)
        name = head + tail
        extends = any(
            name.startswith(d) and name[len(d) : len(d) + 1] in ("_", *string.ascii_uppercase) for d in tests
        )
        if name not in existing and name != original and not extends:
            taken.add(name)
            return name
    name = head + ("".join(w.capitalize() for w in own) if camel else "_".join(own)) + str(rng.randint(2, 9))
    taken.add(name)
    return name


def file_names(tree: ast.Module, rng: random.Random) -> FileNames:
    """Helper names for one file, CamelCase/snake_case of its own words, none defined in it."""
    words, defined = _vocabulary(tree)
    got: list[str] = []
    while len(got) < 4:
        a, b = rng.choice(words), rng.choice(words)
        name = f"_{a.capitalize()}{b.capitalize()}" if a != b else f"_{a.capitalize()}"
        if name not in defined and name not in got and not name.lstrip("_").lower().startswith("test"):
            got.append(name)
    return FileNames(
        sentinel_class=got[0], sentinel=f"_{_words(got[1])[0]}_{_words(got[1])[-1]}".replace("__", "_"),
        error=got[2] + "Error", null_context=got[3],
    )  # fmt: skip
