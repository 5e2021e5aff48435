"""Capability scan of the code a patch adds, on its syntax tree (stage 3 of the grading pipeline).

CONTRACT STUB (filled in by the capability-scan work of issue 24): the names, fields and signatures
below are the interface the grading pipeline calls; the implementation returns no findings yet.

Code in the package under test runs inside the test process, so added code that reaches into the
runner or the interpreter (computed imports, ``sys.modules``, ``gc``, frames, ``atexit``, signals,
``/proc``, ``ctypes``, rebinding builtins, writing to the process's descriptors, ``exec`` of built
strings) can forge a test result. Findings are judged on the syntax tree, never on text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Action",
    "CapabilityConfig",
    "CapabilityFinding",
    "CapabilityReport",
    "ChangedSource",
    "scan_changes",
    "scan_source",
]

Action = Literal["void", "flag", "ignore"]


class CapabilityConfig(BaseModel):
    """What a finding of each capability does to the reward (plugin keys ``swe_integrity_capabilities``)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    default_action: Action = "void"
    """Action of a capability not named in ``actions``."""
    actions: dict[str, Action] = Field(default_factory=dict)
    """Capability name -> void (reward voided) / flag (recorded only) / ignore."""


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
    """Short name of the capability, e.g. ``sys_modules``, ``frame_inspection``, ``proc_fs``."""
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


def scan_source(
    path: str, before: str | None, after: str, config: CapabilityConfig | None = None
) -> list[CapabilityFinding]:
    """Findings in the code of `after` that is not in `before` (added code only)."""
    return []


def scan_changes(
    changes: Iterable[ChangedSource], config: CapabilityConfig | None = None
) -> CapabilityReport:
    """Scan every added or modified Python source of a canonical patch."""
    findings: list[CapabilityFinding] = []
    for change in changes:
        if change.after is not None and change.path.endswith(".py"):
            findings += scan_source(change.path, change.before, change.after, config)
    return CapabilityReport(findings=findings)
