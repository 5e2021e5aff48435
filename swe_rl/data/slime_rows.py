"""The rows `swe-preprocess` writes: a flat SWE-bench-style record of an instance, and the slime prompt row
that carries it in ``metadata`` (what `swe_rl.slime` reads back)."""

from __future__ import annotations

from typing import Any

from swe_rl.tasks import TaskInstance
from swe_rl.tasks.records import instance_record

__all__ = ["instance_record", "slime_row"]


def slime_row(inst: TaskInstance) -> dict[str, Any]:
    """One slime prompt row: the issue text, and the instance in ``metadata``."""
    return {
        "text": inst.problem_statement,
        "metadata": {"instance": instance_record(inst), "data_source": inst.data_source},
    }
