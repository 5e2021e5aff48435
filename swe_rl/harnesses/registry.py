"""Harnesses by name, and the per-instance choice of a harness when training mixes them.

    harness = harness_by_name("codeact")                        # bash_block, codeact, codex, opencode
    name = choose_harness("django__django-11099", {"bash_block": 0.4, "codeact": 0.2,
                                                   "codex": 0.2, "opencode": 0.2}, seed=0)

`choose_harness` is deterministic: the same instance id, weights and seed give the same harness
in every process and every run (sha256 of seed and instance id, not Python's salted hash), so all
samples of a group and every epoch see an instance under one harness, and the mix over many
instances follows the weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from swe_rl.protocols import Harness

__all__ = ["HARNESS_NAMES", "canonical_harness_name", "choose_harness", "harness_by_name", "harness_class"]

HARNESS_NAMES = ("bash_block", "codeact", "codex", "opencode")
ALIASES = {"openhands": "codeact"}


def canonical_harness_name(name: str) -> str:
    """The one recorded name of a harness (``bash-block`` -> ``bash_block``, ``openhands`` -> ``codeact``);
    ValueError for an unknown name."""
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in HARNESS_NAMES:
        raise ValueError(f"unknown harness {name!r} (known: {', '.join(HARNESS_NAMES)})")
    return key


def harness_class(name: str) -> Callable[..., Any]:
    """The class of a harness by name (imported on demand)."""
    key = canonical_harness_name(name)
    if key == "bash_block":
        from swe_rl.harnesses.bash_block import BashBlockHarness

        return BashBlockHarness
    if key == "codeact":
        from swe_rl.harnesses.codeact import CodeActHarness

        return CodeActHarness
    if key == "codex":
        from swe_rl.harnesses.codex import CodexHarness

        return CodexHarness
    if key == "opencode":
        from swe_rl.harnesses.opencode import OpenCodeHarness

        return OpenCodeHarness
    raise AssertionError(key)  # every canonical name is handled above


def harness_by_name(name: str, config_path: str | Path | None = None) -> Harness:
    """A harness by name; ``config_path`` is a YAML of its prompts and limits (default: swe_rl/configs/harness_<name>.yaml)."""
    cls = harness_class(name)
    if config_path is None:
        return cls()
    from swe_rl.harnesses.bash_block import BashBlockConfig, BashBlockHarness
    from swe_rl.harnesses.tool_harness import ToolHarnessConfig

    if cls is BashBlockHarness:
        return cls(BashBlockConfig.from_yaml(config_path))
    return cls(ToolHarnessConfig.from_yaml(config_path))


def check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights by canonical name; ValueError on unknown names, negative weights or a zero total."""
    out: dict[str, float] = {}
    for name, weight in weights.items():
        key = canonical_harness_name(name)
        if float(weight) < 0:
            raise ValueError(f"harness weight of {name!r} is negative: {weight}")
        out[key] = out.get(key, 0.0) + float(weight)
    if sum(out.values()) <= 0:
        raise ValueError(f"harness weights sum to zero: {dict(weights)}")
    return out


def choose_harness(instance_id: str, weights: Mapping[str, float], seed: int = 0) -> str:
    """The harness an instance is played with under a mix: a stable hash of (seed, instance id) picks
    a point in [0, 1), which falls into one harness's share of the weights (in the mapping's order)."""
    checked = check_weights(weights)
    digest = hashlib.sha256(f"{seed}\x00{instance_id}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64 * sum(checked.values())
    acc = 0.0
    items = [(n, w) for n, w in checked.items() if w > 0]
    for name, weight in items:
        acc += weight
        if point < acc:
            return name
    return items[-1][0]
