"""Twins of Go, JavaScript and Rust tests (see `swe_rl.grading.twins`)."""

from __future__ import annotations

import random

from swe_rl.grading.canaries import CanaryPlan
from swe_rl.grading.twin_plan import TwinPlan
from swe_rl.tasks import TaskInstance

__all__ = ["plan_language_twins"]


def plan_language_twins(
    instance: TaskInstance, canary_plan: CanaryPlan, sources: dict[str, str | None], rng: random.Random
) -> TwinPlan:
    return TwinPlan(refused=f"no twins for the runner {canary_plan.runner or '?'}")
