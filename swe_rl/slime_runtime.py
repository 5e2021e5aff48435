"""What the plugin needs to know about the slime run it is in: who aborts, which options it can serve.

- `slime_aborting(args)`: slime itself is aborting this rollout (``GenerateState(args).aborted``, read
  without creating the state). An SGLang abort while this is false (router restart, engine crash) is
  not slime's doing: the plugin then removes the rollout instead of handing back an ABORTED sample.
- `check_options(args, dynamic_history, evaluation)`: refuses, at the first call, slime options that
  cannot work with list returns (one sample per step): ``--group-rm``, ``--partial-rollout`` and
  upstream's step-level dynamic sampling filters; warns when the trajectory reward post-process is
  not configured for a group-normalising estimator.
- `routing_headers(args, sample)`: slime's routing key header when the router hashes consistently,
  so every turn of one trajectory reaches the same SGLang engine (prefix cache).
slime is imported lazily; without it nothing is aborting and every check is on ``args`` alone.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["POST_PROCESS_PATH", "ROUTING_KEY_HEADER", "TRAJECTORY_FILTER_PATH", "check_options", "routing_headers",
           "slime_aborting"]

log = logging.getLogger(__name__)
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
"""Header slime sends with ``--router-policy consistent_hashing`` (its value: the sample's session_id)."""
POST_PROCESS_PATH = "swe_rl.advantages.post_process_rewards"
TRAJECTORY_FILTER_PATH = "swe_rl.slime_filters.check_trajectory_reward_nonzero_std"
_STEP_FILTERS = "slime.rollout.filter_hub.dynamic_sampling_filters."
_warned: set[str] = set()


@functools.lru_cache(maxsize=1)
def _generate_state() -> tuple[Any, Any] | None:
    try:
        from slime.rollout.sglang_rollout import GenerateState
        from slime.utils.misc import SingletonMeta
    except ImportError:
        return None
    return GenerateState, SingletonMeta


def slime_aborting(args: Any) -> bool:
    """True while slime aborts the rollout's outstanding requests (end of a rollout, dynamic sampling)."""
    found = _generate_state()
    if found is None:
        return False
    cls, meta = found
    state = getattr(meta, "_instances", {}).get(cls)
    return bool(state is not None and getattr(state, "aborted", False))


def routing_headers(args: Any, sample: Any) -> dict[str, str]:
    """``{X-SMG-Routing-Key: session_id}`` under ``--router-policy consistent_hashing``, else nothing."""
    session = getattr(sample, "session_id", None)
    if session and getattr(args, "router_policy", None) == "consistent_hashing":
        return {ROUTING_KEY_HEADER: str(session)}
    return {}


def check_options(args: Any, *, dynamic_history: bool, evaluation: bool) -> None:
    """Fail fast (ValueError naming the flag) on options that break with one sample per step."""
    if evaluation or not dynamic_history:
        return
    why = "swe_dynamic_history returns a list of samples per rollout (one per step)"
    if getattr(args, "group_rm", False):
        raise ValueError(f"--group-rm is not supported: {why}, and upstream's group reward assigns one reward per "
                         "group item. The SWE reward needs no group: drop --group-rm (or set swe_dynamic_history: "
                         "false).")
    if getattr(args, "partial_rollout", False):
        raise ValueError(f"--partial-rollout is not supported: {why}; upstream's abort walks group items as "
                         "single samples, and an agent episode cannot resume anyway (its container is gone). Drop "
                         "--partial-rollout (or set swe_dynamic_history: false: aborted episodes are then replayed "
                         "from the start).")
    path = getattr(args, "dynamic_sampling_filter_path", None) or ""
    if path.startswith(_STEP_FILTERS):
        raise ValueError(f"--dynamic-sampling-filter-path {path} judges single samples but {why}: use "
                         f"--dynamic-sampling-filter-path {TRAJECTORY_FILTER_PATH} (or its _with_fallback variant), "
                         "which judges trajectories.")
    estimator = getattr(args, "advantage_estimator", None)
    if (estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
            and getattr(args, "rewards_normalization", True)
            and getattr(args, "custom_reward_post_process_path", None) is None and "post_process" not in _warned):
        _warned.add("post_process")
        log.warning("--advantage-estimator %s with swe_dynamic_history but no --custom-reward-post-process-path: "
                    "upstream normalises step samples batch-wide, not trajectories per prompt group; pass "
                    "--custom-reward-post-process-path %s (docs/advantages.md)", estimator, POST_PROCESS_PATH)
