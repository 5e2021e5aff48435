"""The capability scan of the code a patch adds (stage 3 of the grading pipeline): the entry point.

``scan_changes(changes) -> CapabilityReport`` scans every added or modified source of a canonical
patch; ``scan_source`` one file. Inside the package, one job per module:

- ``scan``: added sites of a file (before/after compared by anchor), findings, report and config;
- ``catalogue``: each capability's name, default action and the qualified names that reach it;
- ``names``: aliases, literal lookups and strings folded from constant pieces;
- ``foreign``: which expressions hold an object reached through a capability;
- ``visitor``: the walk of one syntax tree that lists the sites;
- ``source_text``: a file's text as the interpreter decodes it (PEP 263 codec, BOM);
- ``fragments``: the largest windows of a piece of code that parse (hunks, edits);
- ``other_languages``: the same classes for Go, JavaScript/TypeScript and Rust, on tree-sitter trees.
"""

from __future__ import annotations

from swe_rl.grading.scans.capabilities.catalogue import Action
from swe_rl.grading.scans.capabilities.scan import (
    CapabilityConfig,
    CapabilityFinding,
    CapabilityReport,
    ChangedSource,
    changed_source,
    is_python_source,
    is_test_path,
    scan_changes,
    scan_fragment,
    scan_source,
)

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
