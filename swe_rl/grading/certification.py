"""The certification ledger: which instances are fit to train and evaluate on, and their flaky tests.

An instance is *certified* when its gold patch resolves it every time (K runs, each in a
fresh container), the tests run without a patch (empty patch) do not resolve it, and no
run failed on the fleet. Tests whose status differs across the gold runs are *flaky*.
`eval/certify.py` writes the ledger (JSONL, one row per certification; the last row of an
instance counts); data preparation (``certify.py filter``), the slime plugin
(``swe_require_certified``) and eval (``--certified-only``) read it.

The flaky rule: a grade that failed only on tests the ledger knows to be flaky
(`flaky_only_failure`) is marked; the plugin drops such a sample instead of scoring it as a
failure, eval reports it in its ``flaky_only`` column.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from swe_rl.grading.result import GradeResult, GradeStatus

__all__ = [
    "CertificationGate",
    "Ledger",
    "LedgerEntry",
    "certification_gate",
    "flaky_only_failure",
    "read_ledger",
]


class LedgerEntry(BaseModel):
    """One instance's certification."""

    instance_id: str
    """Which instance."""
    certified: bool
    """Gold resolved every run, the empty patch did not, nothing failed on the fleet."""
    reason: str = ""
    """Why not certified (empty when certified)."""
    env_error: bool = False
    """A run failed on the fleet: the verdict is unknown (certify.py runs it again on resume)."""
    image: str = ""
    """Image name the runs used."""
    image_id: str | None = None
    """Docker image id (sha256:...) on the node, when the node could be asked."""
    repo_digests: list[str] = Field(default_factory=list)
    """Registry digests of the image, when it has any."""
    network: bool | str = False
    """Network of the grading containers."""
    gold_runs: int = 0
    """How many times the gold patch was graded."""
    gold_statuses: list[str] = Field(default_factory=list)
    """Grade status of each gold run."""
    gold_apply_strategies: list[str | None] = Field(default_factory=list)
    """How the gold patch applied in each run."""
    empty_status: str = ""
    """Status of the empty-patch run (no_patch when its tests ran)."""
    empty_would_resolve: bool = False
    """The tests without a patch already meet FAIL_TO_PASS and PASS_TO_PASS (a broken instance)."""
    tests: dict[str, list[str]] = Field(default_factory=dict)
    """Test -> its status in each gold run (``MISSING`` when absent from a run's log)."""
    empty_tests: dict[str, str] = Field(default_factory=dict)
    """Test -> status without a patch."""
    flaky_tests: list[str] = Field(default_factory=list)
    """Tests whose status differed across the gold runs."""
    gold_seconds: list[float] = Field(default_factory=list)
    """Wall time of each gold grading."""
    empty_seconds: float | None = None
    """Wall time of the empty-patch grading."""
    certified_at: float = 0.0
    """Unix time of the certification."""


class Ledger:
    """The last entry per instance of a ledger file."""

    def __init__(self, entries: dict[str, LedgerEntry] | None = None, path: Path | None = None) -> None:
        self.entries = entries or {}
        self.path = path

    def __contains__(self, instance_id: str) -> bool:
        return instance_id in self.entries

    def get(self, instance_id: str) -> LedgerEntry | None:
        return self.entries.get(instance_id)

    def is_certified(self, instance_id: str) -> bool:
        entry = self.entries.get(instance_id)
        return bool(entry and entry.certified)

    def certified_ids(self) -> set[str]:
        return {i for i, e in self.entries.items() if e.certified}

    def flaky_tests(self, instance_id: str) -> set[str]:
        entry = self.entries.get(instance_id)
        return set(entry.flaky_tests) if entry else set()


def read_ledger(path: str | Path) -> Ledger:
    """Read a ledger JSONL (torn or foreign lines are skipped; a missing file is an error)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"certification ledger not found: {path}")
    entries: dict[str, LedgerEntry] = {}
    for line in path.read_text().splitlines():
        try:
            entry = LedgerEntry.model_validate(json.loads(line))
        except (ValueError, TypeError):
            continue
        entries[entry.instance_id] = entry
    return Ledger(entries, path)


def flaky_only_failure(grade: GradeResult, flaky: set[str] | Any) -> bool:
    """Unresolved only because of tests known to be flaky: every failing FAIL_TO_PASS / PASS_TO_PASS
    test is flaky (and at least one failed)."""
    if grade.status is not GradeStatus.UNRESOLVED or not flaky:
        return False
    failing = [*grade.fail_to_pass.failure, *grade.pass_to_pass.failure]
    return bool(failing) and all(t in flaky for t in failing)


_GATES: dict[str, CertificationGate] = {}


class CertificationGate:
    """The plugin's use of a ledger (``swe_require_certified``): which instances to play, which grades to drop."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def refusal(self, instance_id: str) -> str | None:
        """Why the instance must not be trained on, or None."""
        entry = self.ledger.get(instance_id)
        if entry is None:
            return f"uncertified: {instance_id} is not in the ledger {self.ledger.path}"
        if not entry.certified:
            return f"uncertified: {entry.reason or 'not certified'}"
        return None

    def flaky_only(self, grade: GradeResult | None) -> bool:
        return grade is not None and flaky_only_failure(grade, self.ledger.flaky_tests(grade.instance_id))


def certification_gate(path: str | None) -> CertificationGate | None:
    """The gate of a ledger path (read once per process), or None when no ledger is required."""
    if not path:
        return None
    if path not in _GATES:
        _GATES[path] = CertificationGate(read_ledger(path))
    return _GATES[path]
