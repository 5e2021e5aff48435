"""An episode's state at step t as a value: branch from it as many times as you like.

    result = await run_agent(instance, policy, harness, client=client, fork_at=3)
    fork = result.fork                                   # EpisodeFork: 3 steps done, nothing of step 3
    branches = await asyncio.gather(*(
        run_agent(instance, new_policy(), harness, client=client, resume=fork) for _ in range(4)))

A fork holds the history (messages and step records), the environment's snapshot (its repository
changes against the episode baseline, `swe_rl.fleet.snapshot_protocol`) and the policy's own state
(`ForkablePolicy`: for the token policy, the `TokenTrajectory` so far). A branch leases a container
restored from the snapshot (hash-verified by the fleet), the policy takes a copy of that state, and
the loop goes on at step t: the first call of every branch sends exactly the ids the unforked
episode sent at step t, so a branch is token-exact from the fork point on.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from swe_rl.agent.protocols import Message, TokenUsage
from swe_rl.agent.results import Step
from swe_rl.fleet.errors import FleetError
from swe_rl.fleet.snapshot_protocol import SnapshotInfo
from swe_rl.tasks.instance import TaskInstance

__all__ = ["EpisodeFork", "ForkablePolicy", "SnapshotEnvironment", "drop_snapshot", "take_fork"]


@runtime_checkable
class ForkablePolicy(Protocol):
    """A policy whose per-episode state can be copied out at a fork and into a branch."""

    def fork_state(self) -> Any:
        """A copy of what the policy keeps of this episode (never shared with the running episode)."""
        ...

    def restore_state(self, state: Any) -> None:
        """Continue from `state` (a copy is taken: branches never share it); after `start_episode`."""
        ...


@runtime_checkable
class SnapshotEnvironment(Protocol):
    """An environment that can capture its state (`FleetEnvironment`: a lease snapshot)."""

    async def snapshot(self, extra_paths: list[str] | None = None) -> SnapshotInfo: ...


@dataclass(frozen=True)
class EpisodeFork:
    """The state of one episode after `step` steps: history, environment snapshot, policy state."""

    instance: TaskInstance
    step: int
    """Steps done; a branch's first policy call is step `step`."""
    messages: list[Message]
    steps: list[Step]
    usage: TokenUsage
    snapshot: SnapshotInfo
    """Where the environment's state is kept (`allocate(from_snapshot=snapshot.snapshot_id)`)."""
    policy_state: Any = None
    """`ForkablePolicy.fork_state()` at the fork, None for a stateless policy."""
    format_errors: int = 0
    """Consecutive format errors before the fork (the limit counts across it)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Caller's notes (e.g. the sample's group), carried to every branch untouched."""

    def history(self) -> tuple[list[Message], list[Step]]:
        """Private copies of the messages and step records for one branch."""
        return copy.deepcopy(self.messages), [s.model_copy(deep=True) for s in self.steps]


async def drop_snapshot(env: Any, fork: EpisodeFork) -> None:
    """Delete a fork's snapshot now (a superseded checkpoint), best effort: it also expires by itself."""
    client = getattr(getattr(env, "lease", None), "client", None)
    if client is None:
        return
    try:
        await client.delete_snapshot(fork.snapshot.snapshot_id)
    except FleetError:
        pass


async def take_fork(
    instance: TaskInstance,
    step: int,
    messages: list[Message],
    steps: list[Step],
    usage: TokenUsage,
    env: Any,
    policy: Any,
    format_errors: int = 0,
    extra_paths: list[str] | None = None,
) -> EpisodeFork:
    """Capture the episode now; the environment must be a `SnapshotEnvironment`."""
    if not isinstance(env, SnapshotEnvironment):
        raise TypeError(f"{type(env).__name__} cannot take snapshots: forks need a fleet environment")
    snapshot = await env.snapshot(extra_paths)
    return EpisodeFork(
        instance=instance,
        step=step,
        messages=copy.deepcopy(messages),
        steps=[s.model_copy(deep=True) for s in steps],
        usage=usage.model_copy(),
        snapshot=snapshot,
        policy_state=policy.fork_state() if isinstance(policy, ForkablePolicy) else None,
        format_errors=format_errors,
    )
