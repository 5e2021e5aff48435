"""The agent: one episode of Policy → Harness → Environment → … → patch, and its grade.

- `protocols`: the seams (`Policy`, `Harness`, `ToolHarness`, `Environment`, `EnvFactory`, `Grader`)
  and the data they pass (`PolicyTurn`, `Action`, `CommandResult`); start here.
- `errors`: the exceptions that steer the loop (`FormatError`, the `PolicyError` tree).
- `loop`: `run_agent` (one episode) and `run_instance` (an episode and the grade of its patch).
- `results`: `AgentResult`, `ExitReason`, `Step`, `InstanceResult`.
- `fleet_environment`: the `Environment` over a fleet lease; `local_environment`: over a temporary
  git checkout on this host (unit tests, no Docker).
- `git_hygiene`: git history beyond the base commit removed at episode start;
  `monitor`: suspicious actions flagged per step.

The names most callers need are importable from here; they are loaded on first use, so importing
one submodule (a harness needs only `protocols`) does not load the loop and what it grades with.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swe_rl.agent.loop import AgentConfig, StepObserver, harness_name, run_agent, run_instance
    from swe_rl.agent.results import AgentResult, ExitReason, InstanceResult, Step

__all__ = [
    "AgentConfig",
    "AgentResult",
    "ExitReason",
    "InstanceResult",
    "Step",
    "StepObserver",
    "harness_name",
    "run_agent",
    "run_instance",
]

_HOME = {
    "AgentConfig": "loop",
    "StepObserver": "loop",
    "harness_name": "loop",
    "run_agent": "loop",
    "run_instance": "loop",
    "AgentResult": "results",
    "ExitReason": "results",
    "InstanceResult": "results",
    "Step": "results",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
