"""Starting one warm container: the handle a create may be promised, its labels, its baseline ahead.

The warm pool (`warm.py`) decides what to start and when; this module holds what one start is: the
`WarmStart` handle a waiting create may be promised before the container is up, the labels of an
unclaimed warm container (no lease, no owner: labels cannot change after the start, so a claim
keeps its lease in memory and in `claimed_state`), and the episode baseline recorded ahead.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.exec.containers import ContainerRecord, Containers, CreateSpec
from swe_rl.fleet.protocol import (
    LABEL_DEADLINE,
    LABEL_IDLE_TTL,
    LABEL_LEASE,
    LABEL_OWNER,
    LABEL_WARM,
)

log = logging.getLogger("swe_exec_server")


@dataclass(eq=False)
class WarmStart:
    """A warm container being started; a create may be promised it before it is up."""

    spec: CreateSpec
    deadline: float
    ttl: float
    promised: bool = False
    abandoned: bool = False
    rec: ContainerRecord | None = None
    done: threading.Event = field(default_factory=threading.Event)


def warm_labels(start: WarmStart) -> dict[str, str]:
    """The labels of an unclaimed warm container: marked warm, no lease or owner, its deadline and TTL."""
    return {
        LABEL_WARM: "1",
        LABEL_LEASE: "",
        LABEL_OWNER: "",
        LABEL_DEADLINE: f"{start.deadline:.3f}",
        LABEL_IDLE_TTL: f"{start.ttl:.3f}",
    }


def record_baseline_ahead(containers: Containers, container_id: str, workdir: str) -> bool:
    """Record the episode baseline in a just-started warm container of a `baseline` spec. Why: a
    restore's largest part was recording it (`git add -A` over the whole tree); done here it is off
    the restore's path. Whether it worked: when not (not a git work tree), the restore records one."""
    try:
        res = containers.backend.exec_run(
            container_id,
            patch_baseline.BASELINE_CORE,
            timeout=600.0,
            workdir=workdir,
            env=None,
            max_output=64 << 10,
            merge_stderr=False,
        )
    except Exception as exc:  # noqa: BLE001 - the container is still a good warm one, without it
        log.debug("baseline ahead in %s failed: %s", container_id[:12], exc)
        return False
    return res.returncode == 0 and not res.timed_out
