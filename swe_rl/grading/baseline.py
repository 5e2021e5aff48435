"""The patch baseline: what a repository holds before anyone acts, so a later diff is the change only.

The image's own install step may leave untracked build output in the repository; recorded before
the agent's first action (and in a grading container before the patch goes in), it never becomes
part of a patch. The fleet's lease records it (``POST /container/diff {"record_baseline": true}``,
see swe_rl/fleet/patch_baseline.py); environments without the call are left as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from swe_rl.fleet.errors import BadRequest

__all__ = ["record_baseline"]

log = logging.getLogger(__name__)


async def record_baseline(env: Any) -> str | None:
    """Record what the repo holds before the agent acts, so the patch is the agent's changes only.
    Environments without the call are left as they are; a repo the baseline cannot be taken in
    (no git work tree) is logged and diffs as before."""
    record = getattr(env, "record_baseline", None)
    if record is None:
        return None
    try:
        return await record()
    except BadRequest as exc:
        log.warning("no patch baseline in %r: %s", env, exc)
        return None
