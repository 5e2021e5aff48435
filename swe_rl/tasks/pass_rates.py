"""Pass rates: how often policies resolved each instance, from eval and training attempts.

An *attempts file* is JSONL, one graded attempt a line: ``{"instance_id", "resolved",
"policy_version", "source", "at"}`` (`Attempt`; eval, training and certification append to it
with `append_attempts`). Eval's ``results.jsonl`` rows (``instance_id`` + ``status``) read as
attempts too. Attempts that failed on the fleet (``env_error``) or whose tests timed out
(``eval_timeout``) say nothing about the policy and are not counted, as they are never a reward.

`PassRateTable` sums them per instance and per policy version; `PassRateBand` says whether an
instance belongs in a training set by its pass rate (DAPO-style: drop what is always 0 or always 1).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

__all__ = [
    "NOT_COUNTED_STATUSES",
    "Attempt",
    "PassRate",
    "PassRateBand",
    "PassRateTable",
    "append_attempts",
    "read_attempts",
]

NOT_COUNTED_STATUSES = frozenset({"env_error", "eval_timeout"})
"""Grade statuses that are not a verdict on the policy (infrastructure, or tests that never finished)."""


class Attempt(BaseModel):
    """One graded attempt of a policy on an instance."""

    instance_id: str = Field(min_length=1)
    """Which instance."""
    resolved: bool
    """Whether the attempt resolved it (FAIL_TO_PASS and PASS_TO_PASS met)."""
    policy_version: str = ""
    """Which policy made it: a model name, a checkpoint step, ``gold``."""
    source: str = ""
    """Where it was seen: ``eval``, ``train``, ``certify``."""
    at: float = 0.0
    """Unix time of the grade."""


def append_attempts(path: str | Path, attempts: Iterable[Attempt]) -> int:
    """Append attempts to a JSONL file (created when missing); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("a", encoding="utf-8") as fh:
        for attempt in attempts:
            if not attempt.at:
                attempt = attempt.model_copy(update={"at": time.time()})
            fh.write(attempt.model_dump_json() + "\n")
            count += 1
    return count


def _attempt_of(row: Any, policy_version: str | None) -> Attempt | None:
    """An `Attempt` row, or an eval results row (``status``); None for rows that are not counted."""
    if not isinstance(row, dict) or not row.get("instance_id"):
        return None
    if "resolved" not in row:
        status = row.get("status")
        if not isinstance(status, str) or status in NOT_COUNTED_STATUSES:
            return None
        row = {**row, "resolved": status == "resolved", "source": row.get("source") or "eval"}
    if policy_version is not None:
        row = {**row, "policy_version": policy_version}
    try:
        return Attempt.model_validate({k: row[k] for k in Attempt.model_fields if k in row})
    except ValueError:
        return None


def read_attempts(path: str | Path, *, policy_version: str | None = None) -> Iterator[Attempt]:
    """Attempts of a JSONL file, streamed; ``policy_version`` overrides the rows' own (eval results
    carry none). Torn lines and rows that are not counted are skipped; a missing file is an error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"attempts file not found: {path}")
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            attempt = _attempt_of(row, policy_version)
            if attempt is not None:
                yield attempt


class PassRate(BaseModel):
    """Resolved / attempts of one instance (under one policy version, or all of them)."""

    attempts: int = 0
    resolved: int = 0

    @property
    def rate(self) -> float | None:
        return self.resolved / self.attempts if self.attempts else None


class PassRateTable:
    """Pass rates per instance, overall and per policy version."""

    def __init__(self) -> None:
        self.by_version: dict[str, dict[str, PassRate]] = {}

    def add(self, attempt: Attempt) -> None:
        rates = self.by_version.setdefault(attempt.instance_id, {})
        cell = rates.setdefault(attempt.policy_version, PassRate())
        cell.attempts += 1
        cell.resolved += int(attempt.resolved)

    @classmethod
    def from_attempts(cls, attempts: Iterable[Attempt]) -> PassRateTable:
        table = cls()
        for attempt in attempts:
            table.add(attempt)
        return table

    def __len__(self) -> int:
        return len(self.by_version)

    def get(self, instance_id: str, policy_version: str | None = None) -> PassRate:
        """The instance's pass rate under ``policy_version`` (None: every version together)."""
        rates = self.by_version.get(instance_id, {})
        if policy_version is not None:
            return rates.get(policy_version, PassRate())
        total = PassRate()
        for cell in rates.values():
            total.attempts += cell.attempts
            total.resolved += cell.resolved
        return total


class PassRateBand(BaseModel):
    """Which pass rates make a training instance: inside ``[min_rate, max_rate]``, with enough attempts."""

    min_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Lowest pass rate kept (inclusive)."""
    max_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    """Highest pass rate kept (inclusive)."""
    drop_never_solved: bool = True
    """Drop instances no attempt resolved (rate 0: no learning signal in a group)."""
    drop_always_solved: bool = True
    """Drop instances every attempt resolved (rate 1: no learning signal either)."""
    min_attempts: int = Field(default=1, ge=1)
    """Fewer attempts than this: the rate is not trusted, the instance counts as unseen."""
    keep_unseen: bool = True
    """Keep instances without (enough) attempts: their difficulty is unknown, so they are tried."""

    @model_validator(mode="after")
    def _ordered(self) -> PassRateBand:
        if self.min_rate > self.max_rate:
            raise ValueError(f"min_rate {self.min_rate} is above max_rate {self.max_rate}")
        return self

    def verdict(self, rate: PassRate) -> str | None:
        """None when the instance is kept, else why it is dropped."""
        if rate.attempts < self.min_attempts or rate.rate is None:
            return None if self.keep_unseen else f"fewer than {self.min_attempts} attempt(s)"
        if self.drop_never_solved and rate.resolved == 0:
            return "never solved"
        if self.drop_always_solved and rate.resolved == rate.attempts:
            return "always solved"
        if not self.min_rate <= rate.rate <= self.max_rate:
            return "outside the band"
        return None
