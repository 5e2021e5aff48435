"""slime's logging backend replaced by a recorder: the modules our hooks import, nothing else.

`slime_backend` installs ``slime.observability.logging_utils`` (``log(args, metrics, step_key)``)
and ``slime.observability.metric_utils`` (``compute_rollout_step(args, rollout_id)``) into
``sys.modules``. The stand-ins behave as the pinned slime does: ``log`` sends the dict to wandb
as is and to tensorboard without the step key, at ``metrics[step_key]`` (so it must be there);
the step is the rollout id, or the train step when ``--wandb-always-use-train-step`` is set.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Call:
    args: Any
    metrics: dict[str, Any]
    step_key: str


@dataclass
class Backend:
    calls: list[Call] = field(default_factory=list)
    wandb: list[dict[str, Any]] = field(default_factory=list)
    tensorboard: list[tuple[str, Any, int]] = field(default_factory=list)

    def log(self, args: Any, metrics: dict[str, Any], step_key: str) -> None:
        self.calls.append(Call(args, dict(metrics), step_key))
        if getattr(args, "use_wandb", False):
            self.wandb.append(dict(metrics))
        if getattr(args, "use_tensorboard", False):
            step = metrics[step_key]
            self.tensorboard.extend((k, v, step) for k, v in metrics.items() if k != step_key)


def compute_rollout_step(args: Any, rollout_id: int) -> int:
    if getattr(args, "wandb_always_use_train_step", False):
        return rollout_id * args.rollout_batch_size * args.n_samples_per_prompt // args.global_batch_size
    return rollout_id


@pytest.fixture
def slime_backend(monkeypatch) -> Backend:
    backend = Backend()
    modules = {
        name: types.ModuleType(name)
        for name in (
            "slime",
            "slime.observability",
            "slime.observability.logging_utils",
            "slime.observability.metric_utils",
        )
    }
    modules["slime.observability.logging_utils"].log = backend.log
    modules["slime.observability.metric_utils"].compute_rollout_step = compute_rollout_step
    modules["slime"].observability = modules["slime.observability"]
    modules["slime.observability"].logging_utils = modules["slime.observability.logging_utils"]
    modules["slime.observability"].metric_utils = modules["slime.observability.metric_utils"]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return backend
