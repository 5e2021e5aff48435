"""slime's fully-asynchronous rollout for rollouts that return a list of samples (segment or turn samples).

    --rollout-function-path swe_rl.slime.fully_async.generate_rollout_fully_async   # with train_async.py

It keeps slime's own worker (`slime.rollout.fully_async_rollout`: the background thread that keeps
``--sglang-server-concurrency × engines`` groups in flight across rollouts and calls slime's
`generate_and_rm_group`) and replaces only its collector, which at the pin reads every group item as one
`Sample`: it sorts groups by ``item.index`` (a list's ``index`` is a method: the rollout stops) and
requeues a group when an item's ``status`` is ABORTED (a list has none: an aborted episode would be
trained). Here both look through the list: groups are ordered by their first sample's ``index``, and a
group with an ABORTED sample anywhere goes back to the data buffer, as upstream intends. slime is
imported at call time; docs/training.md (fully-asynchronous rollouts).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["generate_rollout_fully_async"]


def _samples(item: Any) -> list[Any]:
    return [s for part in item for s in _samples(part)] if isinstance(item, list) else [item]


def _order(group: list[Any]) -> int:
    for sample in _samples(group):
        if getattr(sample, "index", None) is not None:
            return int(sample.index)
    return 0


async def _collect(args: Any, rollout_id: int, data_buffer: Any) -> list[list[Any]]:
    from slime.rollout import fully_async_rollout as upstream
    from slime.utils.types import Sample

    worker = upstream._get_global_worker(args, data_buffer)
    target = args.rollout_batch_size
    collected: dict[int, list[Any]] = {}
    while len(collected) < target:
        drained = worker.get_completed_groups(limit=target - len(collected))
        for gid, group in drained:
            if any(s.status == Sample.Status.ABORTED for s in _samples(group)):
                data_buffer.add_samples([group])  # upstream's rule, through the list: regenerate it later
                continue
            collected[gid] = group
        if not drained:
            await asyncio.sleep(0.05)
    return sorted(collected.values(), key=_order)


def generate_rollout_fully_async(
    args: Any, rollout_id: int, data_buffer: Any, evaluation: bool = False
) -> Any:
    """slime's ``--rollout-function-path`` entry point (the same contract as upstream's of that name)."""
    if evaluation:
        raise ValueError("fully-async rollout doesn't support evaluation mode")
    from slime.utils.async_utils import run

    return run(_collect(args, rollout_id, data_buffer))
