"""What the exec server knows of one container, and what a create request asks for.

`ContainerRecord` is the registry's entry of a managed container (lease, owner, deadlines, activity,
warm state, baseline); `lease_state` is the part a claimed warm container keeps in the state file.
`CreateSpec` is everything a container gets from a create request; its `key` is what a warm
container must match exactly to be claimed. Plain data: `containers`, `warm` and `operations` use them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from swe_rl.fleet.exec.config import parse_bytes

__all__ = ["ContainerRecord", "CreateSpec"]


@dataclass
class ContainerRecord:
    id: str
    name: str
    image: str
    lease_id: str
    owner: str
    workdir: str
    created: float
    deadline: float
    idle_ttl: float
    last_activity: float
    in_flight: int = 0
    warm: bool = False
    """Started ahead and not claimed yet: no lease, evictable, destroyed on stop."""
    from_warm: bool = False
    """Claimed from the warm pool: its labels carry no lease, the state file does."""
    baseline: bool = False
    """An episode-start baseline was recorded: diffs leave out what was there before."""
    image_id: str = ""
    """The image's ID as the backend reported it (`ContainerInfo.image_id`), handed to the lease."""
    baseline_ahead: bool = False
    """Warm with `CreateSpec.baseline`: this node recorded the baseline when it started the container,
    before any lease (a restore checks its tree id against the snapshot's and skips recording one)."""

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        d["idle_seconds"] = round(time.time() - self.last_activity, 3)
        return d

    def lease_state(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "owner": self.owner,
            "deadline": self.deadline,
            "idle_ttl": self.idle_ttl,
            "created": self.created,
            "workdir": self.workdir,
            "image": self.image,
        }


@dataclass(frozen=True)
class CreateSpec:
    """Everything a container gets from a create request: a warm one must match it exactly to be claimed."""

    image: str
    memory: str
    cpus: float
    pids_limit: int
    network: bool | str
    """False: none; True: Docker's default network; a name: that (allowlisted) Docker network."""
    workdir: str
    env: tuple[tuple[str, str], ...]
    baseline: bool = False
    """For restores: warm ones get the baseline recorded ahead (a warm pool apart from the plain one)."""

    @property
    def key(self) -> tuple[Any, ...]:
        return (
            self.image,
            parse_bytes(self.memory),
            self.cpus,
            self.pids_limit,
            self.network,
            self.workdir,
            self.env,
            self.baseline,
        )
