"""Branching groups: the n samples of a group continue one shared episode from the same step t.

With ``swe_branch_at_step: t`` (> 0) the first sample of a group to arrive plays the *trunk*: the
instance's episode up to step t, then stops (`run_agent(fork_at=t, stop_at_fork=True)`). Every sample
of the group (that one too) then plays a branch from the trunk's fork (`resume=`): a container restored
from its snapshot, the trunk's token trajectory, the loop going on at step t. The group's rewards, and
so its advantages (slime's group normalisation, or ours in `post_process`), compare actions taken
from the same state. The trunk's turns are the same ids in every branch: they are masked out
(loss mask 0; ``swe_samples: turn`` drops their samples), so only the continuations are trained.
A trunk that ends before step t (it submitted early) leaves no fork: the samples then play whole
episodes as usual. A trunk that fails on the fleet fails every branch (removed as env_error).
``metadata["swe"]["branch"]`` = ``{"at_step", "snapshot_id"}``. Groups are matched by
``(group_index, instance_id)`` within one rollout process.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from swe_rl.agent.fork import EpisodeFork
from swe_rl.fleet.client import EnvClient
from swe_rl.fleet.errors import FleetError
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.samples import STEP_KEY
from swe_rl.tokens.trajectory import TokenTrajectory

__all__ = ["BranchSettings", "Trunks", "drop_trunk_turns", "mask_trunk", "trunks"]

log = logging.getLogger(__name__)
Key = tuple[Any, str]


@dataclass(frozen=True)
class BranchSettings:
    at_step: int = 0
    """Step the group's samples branch at (0: off); setting ``swe_branch_at_step`` (`PluginConfig`)."""
    group_size: int = 1
    """Samples per group (slime's ``n_samples_per_prompt``): when all are done the trunk's snapshot goes."""

    @classmethod
    def from_config(cls, config: PluginConfig, args: Any) -> BranchSettings:
        """``branch_at_step`` of the plugin's typed settings; the group size is slime's own argument."""
        return cls(config.branch_at_step, int(getattr(args, "n_samples_per_prompt", 1) or 1))


_TRUNKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Trunks] = weakref.WeakKeyDictionary()


def trunks() -> Trunks:
    """The trunks of this process's running event loop (futures belong to one loop)."""
    loop = asyncio.get_running_loop()
    found = _TRUNKS.get(loop)
    if found is None:
        found = _TRUNKS[loop] = Trunks()
    return found


class Trunks:
    """One trunk per group in this process; its fork is shared by the group's branches."""

    def __init__(self) -> None:
        self.trunks: dict[Key, asyncio.Future[EpisodeFork | None]] = {}
        self.done: dict[Key, int] = {}

    async def fork_for(
        self, key: Key, play: Callable[[], Awaitable[EpisodeFork | None]]
    ) -> EpisodeFork | None:
        """The group's fork: played by the first caller, awaited by the others."""
        trunk = self.trunks.get(key)
        if trunk is None:
            trunk = self.trunks[key] = asyncio.ensure_future(play())
        return await asyncio.shield(trunk)

    async def branch_done(self, key: Key, settings: BranchSettings, client: EnvClient) -> None:
        """Count a finished branch; the last one deletes the trunk's snapshot (else it expires)."""
        self.done[key] = self.done.get(key, 0) + 1
        if self.done[key] < settings.group_size:
            return
        trunk = self.trunks.pop(key, None)
        self.done.pop(key, None)
        fork = trunk.result() if trunk is not None and trunk.done() and not trunk.exception() else None
        if fork is not None:
            try:
                await client.delete_snapshot(fork.snapshot.snapshot_id)
            except FleetError as exc:
                log.info("could not delete trunk snapshot %s: %s", fork.snapshot.snapshot_id, exc)


def drop_trunk_turns(samples: list[Any], record: dict[str, Any], mode: str) -> list[Any]:
    """``swe_samples: turn``: the samples of the trunk's turns are not trained (every branch has them)."""
    at = (record.get("branch") or {}).get("at_step")
    if mode != "turn" or not at:
        return samples
    return [s for s in samples if (s.metadata or {}).get(STEP_KEY, {}).get("turn", at) >= at]


def mask_trunk(traj: TokenTrajectory, steps: int) -> None:
    """Loss mask 0 over the ids of the first `steps` turns (the trunk every branch shares)."""
    for turn in traj.turns[:steps]:
        seg = traj.segments[turn.segment]
        off = turn.start - seg.prompt_len
        if off >= 0:  # a turn kept in a compacted prompt is masked there already
            seg.loss_mask[off : off + len(turn.ids)] = [0] * len(turn.ids)
