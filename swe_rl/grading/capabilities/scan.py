"""Capability scan of the code a patch adds, on its syntax tree (stage 3 of the grading pipeline).

Code in the package under test runs inside the test process, so added code that reaches into the
runner or the interpreter (computed imports, ``sys.modules``, ``gc``, frames, ``atexit``, signals,
``/proc``, ``ctypes``, rebinding builtins, writing to the process's descriptors, ``exec`` of built
strings) can forge a test result. Findings are judged on the syntax tree, never on text: the
catalogue is swe_rl/grading/capabilities/catalogue.py, aliases and built names are resolved by
swe_rl/grading/capabilities/names.py, sites are found by swe_rl/grading/capabilities/visitor.py.

Only added code is blamed: the sites of `after` and of `before` are compared by anchor (the site's
statement without line numbers), so pre-existing code of a modified file is not blamed, and code
moved unchanged is not either. A site whose statement changed is added code.
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.grading.capabilities.catalogue import CAPABILITIES, Action
from swe_rl.grading.capabilities.visitor import Site, find_sites

__all__ = [
    "Action",
    "CapabilityConfig",
    "CapabilityFinding",
    "CapabilityReport",
    "ChangedSource",
    "is_python_source",
    "scan_changes",
    "scan_source",
]


class CapabilityConfig(BaseModel):
    """What a finding of each capability does to the reward (plugin keys ``swe_integrity_capabilities``).

    The defaults of each capability are in ``CAPABILITIES`` (swe_rl/grading/capabilities/catalogue.py,
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


def _sites(text: str) -> list[Site] | SyntaxError:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
        return exc if isinstance(exc, SyntaxError) else SyntaxError(str(exc))
    return find_sites(tree)


def _changed_lines(before: str, after: str) -> set[int]:
    """1-based lines of `after` that are not lines of `before` (inserted or replaced)."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return {
        line + 1
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in {"insert", "replace"}
        for line in range(j1, j2)
    }


def added_sites(before: str | None, after: str) -> list[Site] | SyntaxError:
    """Sites of `after` that `before` does not have (compared by capability, detail and anchor)."""
    after_sites = _sites(after)
    if isinstance(after_sites, SyntaxError) or before is None:
        return after_sites
    before_sites = _sites(before)
    if isinstance(before_sites, SyntaxError):
        return after_sites
    remaining = Counter((s.capability, s.detail, s.anchor) for s in before_sites)
    changed = _changed_lines(before, after)
    added = []
    for site in sorted(after_sites, key=lambda s: (s.line in changed, s.line)):  # unchanged lines first
        key = (site.capability, site.detail, site.anchor)
        if remaining[key]:
            remaining[key] -= 1
        else:
            added.append(site)
    return sorted(added)


def scan_source(
    path: str, before: str | None, after: str, config: CapabilityConfig | None = None
) -> list[CapabilityFinding]:
    """Findings in the code of `after` that is not in `before` (added code only)."""
    config = config or CapabilityConfig()
    sites = added_sites(before, after)
    if isinstance(sites, SyntaxError):
        if before is not None and isinstance(_sites(before), SyntaxError):
            return []  # it did not parse before either: nothing of it runs, nothing new to blame
        sites = [Site(sites.lineno or 0, "syntax_error", f"does not parse: {sites.msg}", "")]
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


def scan_changes(
    changes: Iterable[ChangedSource], config: CapabilityConfig | None = None
) -> CapabilityReport:
    """Scan every added or modified Python source of a canonical patch."""
    findings: list[CapabilityFinding] = []
    for change in changes:
        if change.after is not None and is_python_source(change.path, change.after):
            findings += scan_source(change.path, change.before, change.after, config)
    return CapabilityReport(findings=findings)
