"""Stage 2 of the grading pipeline: judge the tree the canonical patch produces, not the patch text.

The canonical patch (`swe_rl.grading.patch.canonical`) comes with the list of what it changes (added,
modified, deleted, type changes, modes, blob ids). Every rule reads that list with names normalised
(Unicode NFKC, case-folded), so a spelling variant is the same name:

- ``symlink``: no symlink added or made (a link can point a harmless name at a hook);
- ``compiled_code``: no compiled Python added (``.pyc``/``.pyo``, extension modules ``.so``/``.pyd``...,
  anything under ``__pycache__``);
- ``archive``: in a Python instance, no archive an import can read (``.zip``, ``.egg``, ``.whl``, ``.pyz``,
  or any file whose bytes are a zip: zipimport reads a zip whatever its name or what precedes it);
- ``interpreter_hook``: ``sitecustomize*`` / ``usercustomize*`` in any form (module, package, pyc,
  extension, symlink); ``path_file``: ``*.pth``;
- ``package_metadata``: anything in a metadata folder whatever its case (``.DIST-INFO``, ``.egg-info``)
  and ``entry_points.txt`` anywhere;
- ``module_shadow``: a new top-level module or package at an import root (the repository's top,
  ``src/``, ``lib/``, repository directories on the interpreter's ``sys.path``, the test patch's
  directories) named like a standard-library module of the image's interpreter or an installed
  distribution (as the interpreter itself lists them), or a test runner module;
- ``runner_config``: project settings whose runner settings, read with tomllib / configparser
  (`swe_rl.grading.scans.runner_config`), differ before and after;
- the named rules of `swe_rl.grading.integrity` (test files, conftest, runner settings files, the
  eval script's files), on the normalised name as well as the written one;
- for a Go, JavaScript or Rust instance, its language's rules (`swe_rl.grading.scans.tree_languages`) instead
  of Python's module and settings rules.

What is left goes through `swe_rl.grading.integrity.neutralise` (line trimming of settings files,
``setup.py`` plugins, the runner-hook line scan) and is the patch the test run gets.
"""

from __future__ import annotations

import fnmatch
import posixpath
import sys

from pydantic import BaseModel, Field

from swe_rl.grading.integrity import (
    _RUNNER_MODULES,
    IntegrityConfig,
    TamperRecord,
    _cap,
    _path_rule,
    neutralise,
    patch_paths,
)
from swe_rl.grading.languages import language_of
from swe_rl.grading.patch.canonical import CanonicalPatch, TreeChange
from swe_rl.grading.patch.split import FileDiff, join_patch, split_patch
from swe_rl.grading.scans.capabilities import ChangedSource, changed_source
from swe_rl.grading.scans.capabilities.other_languages import LANGUAGE_SUFFIXES
from swe_rl.grading.scans.runner_config import RUNNER_CONFIG_FILES, normalise_name, runner_settings
from swe_rl.grading.scans.tree_languages import language_rule
from swe_rl.tasks import TaskInstance

__all__ = ["TreeVerdict", "judge_tree"]

COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dylib", ".dll", ".sl")
"""Compiled code Python can import (normalised names; ``.so.1`` style versions count too)."""
_HOOK_PREFIXES = ("sitecustomize", "usercustomize")
_META_SUFFIXES = (".dist-info", ".egg-info", ".egg")
_MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd", ".pyw")
ARCHIVE_SUFFIXES = (".zip", ".egg", ".whl", ".pyz", ".pyzw")
"""Archives the interpreter imports from once they are on an import path (normalised names)."""
_ZIP_END = b"PK\x05\x06"  # end of central directory: what zipimport looks for, at the end of the file


def _is_zip(data: bytes | None) -> bool:
    """Bytes zipimport would read: a local header at the start or an end record in the last 64 KiB."""
    return data is not None and (data.startswith(b"PK\x03\x04") or _ZIP_END in data[-(1 << 16) - 22 :])


class TreeVerdict(BaseModel):
    """Stage 2's result: the patch the test run gets, and what did not reach it."""

    patch: str
    """The canonical patch without what the rules removed."""
    records: list[TamperRecord] = Field(default_factory=list)
    """One per dropped file, trimmed hunk or flagged hunk."""
    sources: list[ChangedSource] = Field(default_factory=list)
    """The Python files of `patch`, before and after, for the capability scan."""

    @property
    def changed(self) -> bool:
        return any(r.action in ("dropped", "trimmed") for r in self.records)


def _compiled(name: str) -> bool:
    return name.endswith(COMPILED_SUFFIXES) or ".so." in name or ".cpython-" in name and ".so" in name


def _scanned_file(name: str, data: bytes | None, language: str | None) -> bool:
    """Source of the instance's language: for Python, what the interpreter may import or run (by suffix,
    or a script whose first line names python); else the language's suffixes."""
    if language is not None:
        return LANGUAGE_SUFFIXES.get(posixpath.splitext(name)[1]) == language
    first = (data or b"")[:200].split(b"\n", 1)[0]
    return name.endswith((".py", ".pyw", ".pyi")) or first.startswith(b"#!") and b"python" in first


def _module_name(component: str) -> str:
    for suffix in _MODULE_SUFFIXES:
        if component.endswith(suffix):
            return component[: -len(suffix)].split(".")[0]
    return component


def _shadow(change: TreeChange, canon: CanonicalPatch, extra: set[str]) -> str | None:
    """The import name a new top-level module or package at an import root would shadow."""
    facts = canon.interpreter
    stdlib = facts.stdlib or sorted(getattr(sys, "stdlib_module_names", ()))  # no interpreter answered
    known = {normalise_name(n) for n in (*stdlib, *facts.distributions, *_RUNNER_MODULES)}
    roots = {"", "src", "lib", *facts.import_roots, *extra}
    path = change.path
    for root in sorted(roots, key=len, reverse=True):
        if root and not path.startswith(root + "/"):
            continue
        rest = path[len(root) + 1 :] if root else path
        first = rest.split("/", 1)[0]
        module = normalise_name(_module_name(first) if "/" not in rest else first)
        if module not in known:
            continue
        present = facts.import_roots.get(root)
        if present is not None and any(normalise_name(_module_name(p)) == module for p in present):
            continue  # the repository already has it: a change to it is not a new shadow
        if present is None and change.kind != "added":
            continue
        return module
    return None


def _rule(
    change: TreeChange,
    canon: CanonicalPatch,
    instance: TaskInstance,
    script: str,
    config: IntegrityConfig,
    known: tuple[set[str], set[str], set[str]],
) -> tuple[str, str] | None:
    test_files, test_dirs, gold_files = known
    norm = normalise_name(change.path)
    parts = norm.split("/")
    base = parts[-1]
    gone = change.kind == "deleted"
    if change.symlink_after:
        return "symlink", "a symlink in the patch (it can point a harmless name at a hook or a test)"
    if not gone and (_compiled(base) or "__pycache__" in parts[:-1]):
        return "compiled_code", "compiled Python (no source to read, imported like source)"
    if not gone and language_of(instance) is None:
        if base.endswith(ARCHIVE_SUFFIXES) or _is_zip(canon.blobs.get(change.new_blob)):
            return "archive", "an archive the interpreter can import modules from (its code is never scanned)"
    if any(p.startswith(_HOOK_PREFIXES) for p in parts):
        return "interpreter_hook", "sitecustomize/usercustomize run at every interpreter start, in any form"
    if base.endswith(".pth"):
        return "path_file", ".pth files run code and extend sys.path at interpreter start"
    if any(p.endswith(_META_SUFFIXES) for p in parts[:-1]) or base == "entry_points.txt":
        return "package_metadata", "installed package metadata (entry points load pytest plugins)"
    for name in dict.fromkeys((change.path, norm)):
        hit = _path_rule(name, test_files, test_dirs, gold_files, script, config)
        if hit is not None:
            return hit
    if (language := language_of(instance)) is not None:
        return language_rule(change, canon, language, gold_files)  # Python's module rules do not apply
    if change.path in gold_files or norm in gold_files:
        return None
    if config.shadow_check and not gone and (shadowed := _shadow(change, canon, test_dirs)) is not None:
        return (
            "module_shadow",
            f"a new top-level {shadowed!r} shadows the module of that name the tests import",
        )
    if base in RUNNER_CONFIG_FILES:
        before = None if change.kind == "added" else canon.content(change.old_blob)
        after = None if gone else canon.content(change.new_blob)
        unknown = (change.kind != "added" and before is None) or (not gone and after is None)
        if unknown or runner_settings(base, before) != runner_settings(base, after):
            return "runner_config", "the test runner's settings change (as tomllib/configparser read them)"
    return None


def _drop(files: list[FileDiff], paths: set[str]) -> tuple[list[FileDiff], dict[str, str]]:
    kept: list[FileDiff] = []
    dropped: dict[str, str] = {}
    for fd in files:
        if any(p in paths for p in fd.paths):
            dropped[fd.path] = fd.text()
        else:
            kept.append(fd)
    return kept, dropped


def judge_tree(
    canon: CanonicalPatch, instance: TaskInstance, script: str, config: IntegrityConfig
) -> TreeVerdict:
    """Rule on what the canonical patch changes; the patch the test run may see, and why the rest not."""
    norm = normalise_name
    if any(fnmatch.fnmatch(instance.repo, pat) for pat in config.pytest_repos):
        # the runner's own repo: its source *is* the runner's modules (as `neutralise` rules)
        config = config.model_copy(update={"shadow_check": False})
    test_files = set(patch_paths(instance.test_patch))
    test_dirs = {posixpath.dirname(p) for p in test_files} - {""}
    gold_files = set(patch_paths(instance.patch))
    known = (
        test_files | {norm(p) for p in test_files},
        test_dirs | {norm(p) for p in test_dirs},
        gold_files | {norm(p) for p in gold_files},
    )
    rules: dict[str, tuple[str, str]] = {}
    for change in canon.changes:
        hit = _rule(change, canon, instance, script, config, known)
        if hit is not None:
            rules[change.path] = hit
    preamble, files = split_patch(canon.text)
    kept, dropped = _drop(files, set(rules))
    records = [
        TamperRecord(path=path, rule=rule, action="dropped", reason=reason, hunk=_cap(dropped.get(path, "")))
        for path, (rule, reason) in rules.items()
    ]
    # settings files the parser cleared keep every line (the text trimming of `neutralise` reads text)
    cleared = [fd for fd in kept if normalise_name(posixpath.basename(fd.path)) in RUNNER_CONFIG_FILES]
    kept = [fd for fd in kept if fd not in cleared]
    patch, report = neutralise(
        join_patch(preamble, kept),
        test_patch=instance.test_patch,
        gold_patch=instance.patch,
        eval_script=script,
        repo=instance.repo,
        config=config,
    )
    records += report.records
    if cleared:
        patch = join_patch("", [*split_patch(patch)[1], *cleared])
    left = {p for fd in split_patch(patch)[1] for p in fd.paths}
    lang = language.name if (language := language_of(instance)) is not None else None
    sources = [  # read as the interpreter reads them (declared codec, BOM)
        changed_source(
            c.path,
            None if c.kind == "added" else canon.blobs.get(c.old_blob),
            None if c.kind == "deleted" else canon.blobs.get(c.new_blob),
            deleted=c.kind == "deleted",
        )
        for c in canon.changes
        if c.path in left and _scanned_file(norm(c.path), canon.blobs.get(c.new_blob), lang)
    ]
    return TreeVerdict(patch=patch, records=records, sources=sources)
