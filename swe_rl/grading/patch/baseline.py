"""The patch baseline: what a repository holds before anyone acts, so a later diff is the change only.

The image's own install step may leave untracked build output in the repository; recorded before
the agent's first action (and in a grading container before the patch goes in), it never becomes
part of a patch. The fleet's lease records it (``POST /container/diff {"record_baseline": true}``,
see swe_rl/fleet/patch_baseline.py); every `Environment` (swe_rl/agent/protocols.py) declares the call.
"""

from __future__ import annotations

import logging
from typing import Protocol

from swe_rl.fleet.errors import BadRequest

__all__ = ["BaselineRecorder", "record_baseline"]

log = logging.getLogger(__name__)


class BaselineRecorder(Protocol):
    """What records a baseline: an agent `Environment`, or a fleet `Lease` (a grading container)."""

    async def record_baseline(self) -> str | None: ...


async def record_baseline(env: BaselineRecorder) -> str | None:
    """Record what the repo holds before the agent acts, so the patch is the agent's changes only.
    A repo the baseline cannot be taken in (no git work tree) is logged and diffs as before."""
    try:
        return await env.record_baseline()
    except BadRequest as exc:
        log.warning("no patch baseline in %r: %s", env, exc)
        return None
