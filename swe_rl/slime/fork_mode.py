"""Retry from the last good step: an infrastructure failure mid-episode need not cost the sample.

With ``swe_retry_infra_failures: N`` (> 0) the episode checkpoints every ``swe_checkpoint_every`` steps
(a lease snapshot + the token trajectory so far, `swe_rl.agent.fork.EpisodeFork`). When the fleet fails
(node died, container lost, a command's environment timed out) the episode resumes from its last
checkpoint in a new container, up to N times: the ids before the checkpoint are the ones already
sampled, the turns after it are sampled again (the failed attempt's later turns are dropped, never
trained). The sample stays trainable and says so in ``metadata["swe"]["fork"]``
(``retries``, ``retried_from``: the step of each resume, ``errors``). Without a checkpoint (a failure
before the first one) it is removed as before.

Settings are `PluginConfig` fields (``swe_retry_infra_failures``, default 0: off, and
``swe_checkpoint_every``, default 1, in the ``--custom-config-path`` YAML or ``SWE_*``). See docs/fork.md.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from swe_rl.agent import AgentResult
from swe_rl.agent.fork import EpisodeFork
from swe_rl.fleet.client import EnvClient
from swe_rl.fleet.errors import FleetError, FleetUnavailable
from swe_rl.slime.branching import BranchSettings, Key, mask_trunk, trunks
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.samples import Removed
from swe_rl.tokens.trajectory import TokenTrajectory

log = logging.getLogger(__name__)

__all__ = ["RetryLog", "RetrySettings", "play_forked", "run_with_retries"]


@dataclass(frozen=True)
class RetrySettings:
    retries: int = 0
    """Resumes from the last checkpoint after an infrastructure failure (0: off)."""
    checkpoint_every: int = 1
    """Steps between two checkpoints."""

    @classmethod
    def from_config(cls, config: PluginConfig) -> RetrySettings:
        """From the plugin's typed settings (validated there: retries >= 0, checkpoint_every >= 1)."""
        return cls(config.retry_infra_failures, config.checkpoint_every)


@dataclass
class RetryLog:
    """What `run_with_retries` did (``metadata["swe"]["fork"]``)."""

    retries: int = 0
    retried_from: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"retries": self.retries, "retried_from": self.retried_from, "errors": self.errors}


async def run_with_retries(
    run: Callable[..., Awaitable[AgentResult]],
    settings: RetrySettings,
    client: EnvClient,
    resume: EpisodeFork | None = None,
) -> tuple[AgentResult, RetryLog]:
    """`run(**kw)` plays the episode (`run_agent` with everything but the fork arguments bound);
    `resume`: the episode is a branch of that fork (`swe_rl.slime.branching`)."""
    log_ = RetryLog()
    if settings.retries <= 0:
        return await run(resume=resume), log_
    agent = await run(resume=resume, fork_every=settings.checkpoint_every)
    last: EpisodeFork | None = agent.fork
    try:
        while agent.infra_failure and last is not None and log_.retries < settings.retries:
            log_.retries += 1
            log_.retried_from.append(last.step)
            log_.errors.append(str(agent.error))
            log.warning(
                "%s: resuming at step %d after: %s", last.instance.instance_id, last.step, agent.error
            )
            agent = await run(resume=last, fork_every=settings.checkpoint_every)
            if agent.fork is not None:
                await _drop(client, last)
                last = agent.fork
    finally:
        if last is not None:
            await _drop(client, last)
    return agent, log_


async def play_forked(
    run: Callable[..., Awaitable[AgentResult]],
    client: EnvClient,
    retry: RetrySettings,
    branch: BranchSettings,
    key: Key | None,
    trajectory: Callable[[], TokenTrajectory | None],
    info: dict[str, Any],
) -> AgentResult:
    """The episode with the plugin's fork modes: a branch of its group's trunk (`swe_rl.slime.branching`)
    when ``swe_branch_at_step`` is set, retried from its last checkpoint when ``swe_retry_infra_failures``
    is; what happened goes into `info` (``fork``, ``branch``)."""
    fork: EpisodeFork | None = None
    if branch.at_step and key is not None:
        group = trunks()
        try:
            try:
                fork = await group.fork_for(key, lambda: _trunk(run, branch.at_step))
            except FleetError as exc:
                raise Removed(f"env_error: the group's trunk failed: {exc}") from None
            agent, retried = await run_with_retries(run, retry, client, resume=fork)
        finally:
            await group.branch_done(key, branch, client)
    else:
        agent, retried = await run_with_retries(run, retry, client)
    if retried.retries:  # trainable after all: say how
        info["fork"] = retried.record()
    if fork is not None:
        info["branch"] = {"at_step": fork.step, "snapshot_id": fork.snapshot.snapshot_id}
        traj = trajectory()
        if traj is not None:
            mask_trunk(traj, fork.step)
    return agent


async def _trunk(run: Callable[..., Awaitable[AgentResult]], at_step: int) -> EpisodeFork | None:
    """Play the group's shared start up to `at_step`; None when it ended before (no fork to branch)."""
    agent = await run(fork_at=at_step, stop_at_fork=True)
    if agent.infra_failure:
        raise FleetUnavailable(f"trunk: {agent.error}")
    return agent.fork


async def _drop(client: EnvClient, fork: EpisodeFork) -> None:
    try:
        await client.delete_snapshot(fork.snapshot.snapshot_id)
    except FleetError as exc:  # it expires by itself
        log.info("could not delete snapshot %s: %s", fork.snapshot.snapshot_id, exc)
