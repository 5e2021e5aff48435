"""The patch baseline (swe_rl/fleet/patch_baseline.py) for the mini-swe-agent path.

mini-swe-agent's submission is whatever its submit command printed (`git add -A && git diff
--cached`), which sweeps in the untracked build output of the image's own install step. So,
as in our own agent loop: right after the container starts, the work tree is recorded; when
the agent submits, the prediction is the diff against that record. Commands go through
``docker exec`` on mini-swe-agent's container (any mini-swe-agent version).
"""

from __future__ import annotations

import logging
import subprocess
from typing import Any

__all__ = ["agent_patch", "record_baseline"]

log = logging.getLogger(__name__)


def _sh(env: Any, script: str, cwd: str, timeout: float) -> subprocess.CompletedProcess | None:
    cid = getattr(env, "container_id", None)
    if not cid:
        return None
    try:
        return subprocess.run(
            [env.config.executable, "exec", "-w", cwd, cid, "sh", "-c", script],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("patch baseline: docker exec failed: %s", exc)
        return None


def record_baseline(env: Any, cwd: str, timeout: float = 600.0) -> bool:
    """Record the work tree before the agent's first step; False (logged) when it cannot be."""
    from swe_rl.fleet.patch_baseline import BASELINE_SCRIPT

    res = _sh(env, BASELINE_SCRIPT, cwd, timeout)
    if res is None or res.returncode != 0:
        log.warning("no patch baseline in %s: %s", cwd, (res.stderr.strip() if res else "no container")[:500])
        return False
    return True


def agent_patch(env: Any, cwd: str, timeout: float = 600.0) -> str | None:
    """The agent's changes since the baseline, or None when they cannot be had (keep mini's submission)."""
    from swe_rl.fleet.patch_baseline import DIFF_SCRIPT

    res = _sh(env, DIFF_SCRIPT, cwd, timeout)
    if res is None or res.returncode != 0:
        log.warning("no baseline diff in %s: %s", cwd, (res.stderr.strip() if res else "no container")[:500])
        return None
    return res.stdout
