"""Stage 2's rules for the languages of `swe_rl.grading.languages`: what of a Go, JavaScript or Rust tree
must not reach the test run.

Decided on the canonical patch's tree (`swe_rl.grading.patch.canonical`), on normalised names, like Python's:

- ``test_file`` / ``test_dir``: the language's test sources (``*_test.go``, ``*.test.ts``, ``*.spec.js``,
  jest snapshots, ``tests.rs``) and test-material folders (``testdata/``, ``__tests__/``, ``__mocks__/``);
- ``start_up_hook``: runner configuration and what runs before the tests (jest/vitest/mocha/karma/ava
  configs, babel configs that transform test code, ``.npmrc`` ``node-options``, Yarn's PnP loader,
  ``build.rs``, ``.cargo/config.toml``, ``rust-toolchain``, ``go.work``), dropped whole;
- ``dependency_code``: vendored dependencies (``vendor/``, ``node_modules/``: the assertion library and the
  runner itself live there), unless the gold patch changes the same file;
- ``runner_config``: the runner settings of the manifest, parsed before and after — ``package.json``
  (``scripts``, ``jest``, ``mocha``, ``ava``, ``nyc``, ``c8``, ``tap``, ``vitest``, ``babel``),
  ``Cargo.toml`` (``build``, ``autotests``, ``lib``, ``test``, ``bench``, ``profile``, ``patch``, ``replace``,
  ``dev-dependencies``), ``go.mod`` (``replace``, ``toolchain``, ``godebug``); dependencies may change.

Only the rules of the instance's own language apply (a Python row sees none of them).
"""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

from swe_rl.grading.languages import Language
from swe_rl.grading.patch.canonical import CanonicalPatch, TreeChange
from swe_rl.grading.scans.runner_config import _load_toml, normalise_name

__all__ = ["language_rule", "manifest_settings"]

_PACKAGE_JSON_KEYS = ("scripts", "jest", "mocha", "ava", "nyc", "c8", "tap", "vitest", "babel")
_CARGO_KEYS = ("lib", "test", "bench", "profile", "patch", "replace", "dev-dependencies")
_CARGO_PACKAGE_KEYS = ("build", "autotests", "autobenches", "autoexamples")
_GO_DIRECTIVES = ("replace", "toolchain", "godebug")
_UNPARSABLE: dict[str, Any] = {"<unparsable>": True}


def _package_json(text: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        return _UNPARSABLE
    return {k: data[k] for k in _PACKAGE_JSON_KEYS if k in data}


def _cargo_toml(text: str) -> dict[str, Any]:
    if _load_toml is None:  # neither tomllib nor tomli: every Cargo.toml counts as unparsable
        return _UNPARSABLE
    data = _load_toml(text)
    out = {k: data[k] for k in _CARGO_KEYS if k in data}
    package = data.get("package")
    if isinstance(package, dict):
        out |= {f"package.{k}": package[k] for k in _CARGO_PACKAGE_KEYS if k in package}
    return out


def _go_mod(text: str) -> dict[str, Any]:
    """The directives that redirect modules or change the toolchain, in order, whitespace-normalised."""
    found: list[str] = []
    block = ""
    for raw in text.split("\n"):
        line = " ".join(raw.split("//", 1)[0].split())
        if not line:
            continue
        if block:
            if line == ")":
                block = ""
            else:
                found.append(f"{block} {line}")
            continue
        word = line.split(" ", 1)[0]
        if word in _GO_DIRECTIVES:
            if re.fullmatch(rf"{word} \(", line):
                block = word
            else:
                found.append(line)
    return {"directives": found}


_MANIFESTS = {"package.json": _package_json, "cargo.toml": _cargo_toml, "go.mod": _go_mod}


def manifest_settings(name: str, text: str | None) -> dict[str, Any]:
    """The runner settings of a manifest (normalised base name); a file that does not exist has none."""
    if text is None:
        return {}
    try:
        return _MANIFESTS[name](text)
    except ValueError:  # JSON and TOML decode errors are ValueErrors
        return _UNPARSABLE


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, normalise_name(p)) for p in patterns)


def language_rule(
    change: TreeChange, canon: CanonicalPatch, language: Language, gold_files: set[str]
) -> tuple[str, str] | None:
    """(rule, reason) when this change of a tree in ``language`` must not reach the test run."""
    norm = normalise_name(change.path)
    parts = norm.split("/")
    base, dirs = parts[-1], parts[:-1]
    if _matches(base, language.test_files):
        return "test_file", f"a {language.name} test source"
    if any(d in {normalise_name(t) for t in language.test_dirs} for d in dirs):
        return "test_dir", f"a file under a {language.name} test-material directory"
    if _matches(base, language.hook_files) or any(d in language.hook_dirs for d in dirs):
        return "start_up_hook", f"{language.name} runner configuration or code that runs before the tests"
    if (
        any(d in language.dependency_dirs for d in dirs)
        and change.path not in gold_files
        and norm not in gold_files
    ):
        return (
            "dependency_code",
            "vendored dependency code (the test runner and assertion libraries live there)",
        )
    if base in language.manifests and base in _MANIFESTS:
        before = None if change.kind == "added" else canon.content(change.old_blob)
        after = None if change.kind == "deleted" else canon.content(change.new_blob)
        unknown = (change.kind != "added" and before is None) or (change.kind != "deleted" and after is None)
        if unknown or manifest_settings(base, before) != manifest_settings(base, after):
            return "runner_config", f"the runner settings of {base} change (parsed before and after)"
    return None
