"""Capability scan of the code a patch adds, on its syntax tree (stage 3 of the grading pipeline).

Code in the package under test runs inside the test process, so added code that reaches into the
runner or the interpreter (computed imports, ``sys.modules``, ``gc``, frames, ``atexit``, signals,
``/proc``, ``ctypes``, rebinding builtins, writing to the process's descriptors, ``exec`` of built
strings) can forge a test result. Findings are judged on the syntax tree, never on text: the
catalogue is swe_rl/grading/scans/capabilities/catalogue.py, aliases and built names are resolved by
swe_rl/grading/scans/capabilities/names.py, sites are found by swe_rl/grading/scans/capabilities/visitor.py.

Only added code is blamed: the sites of `after` and of `before` are compared by anchor (the site's
statement without line numbers), so pre-existing code of a modified file is not blamed, and code
moved unchanged is not either. A site whose statement changed is added code.

Each file is read as the interpreter reads it (swe_rl/grading/scans/capabilities/source_text.py: declared
codec, BOM): added source in a codec other than UTF-8, or that the interpreter cannot decode, is
``source_encoding``; added code the scan cannot parse is ``syntax_error`` (the image's interpreter may
run what the grader's cannot parse). Test files may build code from data (``eval(repr(x))``): there
``TEST_TOLERATED`` capabilities are flagged, not voided.
"""

from __future__ import annotations

import ast
import difflib
import functools
import posixpath
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.grading.scans.capabilities.catalogue import CAPABILITIES, TEST_TOLERATED, Action
from swe_rl.grading.scans.capabilities.fragments import parseable_fragment
from swe_rl.grading.scans.capabilities.other_languages import (
    LANGUAGE_SUFFIXES,
    LanguageSite,
    language_sites,
    unmatched_sites,
)
from swe_rl.grading.scans.capabilities.source_text import UTF8, ascii_transparent, interpreter_text
from swe_rl.grading.scans.capabilities.visitor import Site, find_sites

__all__ = [
    "Action",
    "CapabilityConfig",
    "CapabilityFinding",
    "CapabilityReport",
    "ChangedSource",
    "changed_source",
    "is_python_source",
    "is_test_path",
    "scan_changes",
    "scan_fragment",
    "scan_source",
]


class CapabilityConfig(BaseModel):
    """What a finding of each capability does to the reward (plugin keys ``swe_integrity_capabilities``).

    The defaults of each capability are in ``CAPABILITIES`` (swe_rl/grading/scans/capabilities/catalogue.py,
    table in docs/reward_integrity.md); ``actions`` overrides some of them, the others keep theirs.
    """

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    default_action: Action = "void"
    """Action of a capability neither named in ``actions`` nor in the catalogue."""
    actions: dict[str, Action] = Field(default_factory=dict)
    """Capability name -> void (reward voided) / flag (recorded only) / ignore; overrides the catalogue."""

    def action_for(self, capability: str) -> Action:
        if capability in self.actions:
            return self.actions[capability]
        return CAPABILITIES[capability][0] if capability in CAPABILITIES else self.default_action


class ChangedSource(BaseModel):
    """One file of the canonical patch: its content before (None: added) and after (None: deleted)."""

    path: str
    before: str | None = None
    after: str | None = None
    problem: str = ""
    """Why `after` is not plain UTF-8 source the scan could read ("" when it is): voided."""


def changed_source(
    path: str, before: bytes | None, after: bytes | None, deleted: bool = False
) -> ChangedSource:
    """One file as the interpreter reads it; `after` None and not `deleted`: its content is unknown."""
    old = interpreter_text(before) if before is not None else None
    if after is None:
        problem = "" if deleted else "its content could not be read (too large)"
        return ChangedSource(path=path, before=old.text if old else None, problem=problem)
    new = interpreter_text(after)
    problem = new.problem
    if new.text is not None and new.encoding != UTF8 and old is not None and old.encoding == new.encoding:
        if ascii_transparent(new.encoding):
            problem = ""  # a file kept in its own Latin-1-like codec: it reads the same to a reviewer
    return ChangedSource(path=path, before=old.text if old else None, after=new.text, problem=problem)


class CapabilityFinding(BaseModel):
    """One capability found in added code."""

    path: str
    line: int
    capability: str
    """Short name of the capability, e.g. ``sys_modules``, ``frame_access``, ``proc_fs``."""
    detail: str
    """What was found, for the tamper record."""
    action: Action = "void"


class CapabilityReport(BaseModel):
    findings: list[CapabilityFinding] = Field(default_factory=list)

    @property
    def voiding(self) -> list[CapabilityFinding]:
        return [f for f in self.findings if f.action == "void"]

    @property
    def flagged(self) -> list[CapabilityFinding]:
        return [f for f in self.findings if f.action == "flag"]


def _sites(text: str, kept: bool = False) -> list[Site] | SyntaxError:
    """The capability sites of `text`; `kept`: a file as it was before the patch, the same for every patch
    of a task's group (RL grades several), walked once (a large module's walk is most of the scan's time;
    a patched file is walked every time, as each patch makes its own)."""
    found = _kept_sites(text) if kept else _walk(text)
    return found if isinstance(found, SyntaxError) else list(found)


def _walk(text: str) -> tuple[Site, ...] | SyntaxError:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
        return exc if isinstance(exc, SyntaxError) else SyntaxError(str(exc))
    return tuple(find_sites(tree))


_kept_sites = functools.lru_cache(maxsize=32)(_walk)


def _changed_lines(before: str, after: str) -> set[int]:
    """1-based lines of `after` that are not lines of `before` (inserted or replaced): the lines both
    start and end with are left out first (a patch changes a few lines of a large file; the matcher's
    work grows with the product of the lengths it compares)."""
    old, new = before.splitlines(), after.splitlines()
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    matcher = difflib.SequenceMatcher(
        None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=False
    )
    return {
        head + line + 1
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in {"insert", "replace"}
        for line in range(j1, j2)
    }


def added_sites(before: str | None, after: str) -> list[Site] | SyntaxError:
    """Sites of `after` that `before` does not have (compared by capability, detail and anchor)."""
    after_sites = _sites(after)
    if isinstance(after_sites, SyntaxError) or before is None:
        return after_sites
    before_sites = _sites(before, kept=True)
    if isinstance(before_sites, SyntaxError):
        return after_sites
    changed = _changed_lines(before, after)
    in_order = sorted(after_sites, key=lambda s: (s.line in changed, s.line))  # unchanged lines first
    return unmatched_sites(in_order, before_sites)


def scan_source(
    path: str, before: str | None, after: str, config: CapabilityConfig | None = None
) -> list[CapabilityFinding]:
    """Findings in the code of `after` that is not in `before` (added code only)."""
    config = config or CapabilityConfig()
    sites = added_sites(before, after)
    if isinstance(sites, SyntaxError):
        if before is not None and isinstance(_sites(before, kept=True), SyntaxError):
            # it did not parse before either (data, another Python's syntax): the parts that parse
            # are scanned, the parse failure itself is not new
            sites = added_sites(
                parseable_fragment(before.splitlines()), parseable_fragment(after.splitlines())
            )
            sites = [] if isinstance(sites, SyntaxError) else sites
        else:
            sites = [Site(sites.lineno or 0, "syntax_error", f"does not parse: {sites.msg}", "")]
    tolerant = is_test_path(path)
    findings = []
    for site in sites:
        action = config.action_for(site.capability)
        if tolerant and action == "void" and site.capability in TEST_TOLERATED:
            action = "flag"
        if action != "ignore":
            findings.append(
                CapabilityFinding(
                    path=path, line=site.line, capability=site.capability, detail=site.detail, action=action
                )
            )
    return findings


def scan_fragment(
    path: str, text: str, before: str | None = None, config: CapabilityConfig | None = None
) -> list[CapabilityFinding]:
    """Findings of `text` (minus those of `before`, both read as fragments)."""
    before_text = None if before is None else parseable_fragment(before.splitlines())
    return scan_source(path, before_text, parseable_fragment(text.splitlines()), config)


def scan_language_source(
    path: str, before: str | None, after: str, config: CapabilityConfig | None = None
) -> list[CapabilityFinding]:
    """Findings in the Go, JavaScript/TypeScript or Rust code of `after` that `before` lacks."""
    config = config or CapabilityConfig()
    language = LANGUAGE_SUFFIXES[posixpath.splitext(path)[1].lower()]
    sites = language_sites(language, before, after)
    if sites is None:
        sites = [LanguageSite(0, "syntax_error", f"{language}: no parser installed (extra lang-scan)", "")]
    findings = []
    for site in sites:
        action = config.action_for(site.capability)
        if action != "ignore":
            findings.append(
                CapabilityFinding(
                    path=path, line=site.line, capability=site.capability, detail=site.detail, action=action
                )
            )
    return findings


def is_python_source(path: str, text: str | None) -> bool:
    """A file the interpreter may run: ``.py``/``.pyw``, or a script whose first line names python."""
    if path.endswith((".py", ".pyw")):
        return True
    first = (text or "").split("\n", 1)[0]
    return first.startswith("#!") and "python" in first


def is_test_path(path: str) -> bool:
    """A test module by the runner's naming (``test_*.py``, ``*_test.py``, ``conftest.py``) or in a
    ``tests``/``test``/``testing`` directory."""
    parts = path.lower().split("/")
    base = posixpath.splitext(parts[-1])[0]
    return (
        base.startswith("test_")
        or base.endswith("_test")
        or base == "conftest"
        or any(p in {"tests", "test", "testing"} for p in parts[:-1])
    )


def scan_changes(
    changes: Iterable[ChangedSource], config: CapabilityConfig | None = None
) -> CapabilityReport:
    """Scan every added or modified Python source of a canonical patch."""
    findings: list[CapabilityFinding] = []
    for change in changes:
        if change.problem:
            action = (config or CapabilityConfig()).action_for("source_encoding")
            if action != "ignore":
                findings.append(
                    CapabilityFinding(
                        path=change.path,
                        line=1,
                        capability="source_encoding",
                        detail=change.problem,
                        action=action,
                    )
                )
        suffix = posixpath.splitext(change.path)[1].lower()
        if change.after is not None and suffix in LANGUAGE_SUFFIXES:
            findings += scan_language_source(change.path, change.before, change.after, config)
        elif change.after is not None and is_python_source(change.path, change.after):
            findings += scan_source(change.path, change.before, change.after, config)
    return CapabilityReport(findings=findings)
