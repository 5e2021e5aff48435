"""Harnesses by name, with their traits, and the per-instance choice of a harness when training mixes them.

    harness = harness_by_name("codeact")                        # bash_block, codeact, codex, opencode
    name = choose_harness("django__django-11099", {"bash_block": 0.4, "codeact": 0.2,
                                                   "codex": 0.2, "opencode": 0.2}, seed=0)

Adding a harness is one file (its class) plus one `HarnessSpec` in `HARNESSES`: every list of names
(`HARNESS_NAMES`, `TOOL_HARNESS_NAMES`, the gold policy's `SHELL_TOOLS`, config and CLI checks) is
derived from that table, and classes are imported only when asked for.

`choose_harness` is deterministic: the same instance id, weights and seed give the same harness
in every process and every run (sha256 of seed and instance id, not Python's salted hash), so all
samples of a group and every epoch see an instance under one harness, and the mix over many
instances follows the weights.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from swe_rl.agent.protocols import Harness, ToolHarness

__all__ = [
    "ALIASES",
    "HARNESSES",
    "HARNESS_NAMES",
    "SHELL_TOOLS",
    "TOOL_HARNESS_NAMES",
    "HarnessSpec",
    "canonical_harness_name",
    "check_weights",
    "choose_harness",
    "harness_by_name",
    "harness_class",
    "harness_spec",
    "harness_tool_schemas",
]


@dataclass(frozen=True)
class HarnessSpec:
    """One registered harness: where its class is, and what the rest of the code needs to know of it."""

    name: str
    """The one recorded name (traj.json ``harness``, ``--harness``, ``swe_harness_mix`` keys)."""
    cls: str
    """``module:Class`` of the harness (imported on demand)."""
    config_cls: str
    """``module:Class`` of its config (``from_yaml`` reads a YAML of prompts and limits)."""
    tool_calls: bool = False
    """Its actions are tool calls (a `swe_rl.agent.protocols.ToolHarness`): tool schemas, Hermes/OpenAI calls."""
    shell_tool: str | None = None
    """The name of its tool that runs a shell command (the gold policy applies a patch through it)."""
    aliases: tuple[str, ...] = ()
    """Other names accepted for it (recorded as `name`)."""


_TOOL_CONFIG = "swe_rl.harnesses.tool_harness:ToolHarnessConfig"

HARNESSES: dict[str, HarnessSpec] = {
    spec.name: spec
    for spec in (
        HarnessSpec(
            "bash_block",
            "swe_rl.harnesses.bash_block:BashBlockHarness",
            "swe_rl.harnesses.bash_block:BashBlockConfig",
        ),
        HarnessSpec(
            "codeact",
            "swe_rl.harnesses.codeact:CodeActHarness",
            _TOOL_CONFIG,
            tool_calls=True,
            shell_tool="execute_bash",
            aliases=("openhands",),
        ),
        HarnessSpec(
            "codex",
            "swe_rl.harnesses.codex:CodexHarness",
            _TOOL_CONFIG,
            tool_calls=True,
            shell_tool="shell_command",
        ),
        HarnessSpec(
            "opencode",
            "swe_rl.harnesses.opencode:OpenCodeHarness",
            _TOOL_CONFIG,
            tool_calls=True,
            shell_tool="bash",
        ),
    )
}
"""Every harness, by name, in the order listings and mixes use."""

HARNESS_NAMES: tuple[str, ...] = tuple(HARNESSES)
"""Every harness name."""
TOOL_HARNESS_NAMES: tuple[str, ...] = tuple(n for n, s in HARNESSES.items() if s.tool_calls)
"""Names of the tool-calling harnesses (a pivot row naming one is parsed as tool calls)."""
SHELL_TOOLS: tuple[str, ...] = tuple(s.shell_tool for s in HARNESSES.values() if s.shell_tool)
"""Shell tools of the tool-calling harnesses, in the order the gold policy looks for them."""
ALIASES: dict[str, str] = {alias: s.name for s in HARNESSES.values() for alias in s.aliases}
"""Other accepted name -> registered name."""


def canonical_harness_name(name: str) -> str:
    """The one recorded name of a harness (``bash-block`` -> ``bash_block``, ``openhands`` -> ``codeact``);
    ValueError for an unknown name."""
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in HARNESSES:
        raise ValueError(f"unknown harness {name!r} (known: {', '.join(HARNESS_NAMES)})")
    return key


def harness_spec(name: str) -> HarnessSpec:
    """The registry entry of a harness by name or alias; ValueError for an unknown name."""
    return HARNESSES[canonical_harness_name(name)]


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def harness_class(name: str) -> Any:
    """The class of a harness by name (imported on demand)."""
    return _load(harness_spec(name).cls)


def harness_by_name(name: str, config_path: str | Path | None = None) -> Harness:
    """A harness by name; ``config_path`` is a YAML of its prompts and limits (default: configs/harness_<name>.yaml)."""
    spec = harness_spec(name)
    cls = _load(spec.cls)
    if config_path is None:
        return cls()
    return cls(_load(spec.config_cls).from_yaml(config_path))


def harness_tool_schemas(name: Any) -> list[dict[str, Any]] | None:
    """The tool schemas of a tool-calling harness by name (or alias), else None (bash blocks, unknown names)."""
    try:
        spec = harness_spec(name) if isinstance(name, str) else None
    except ValueError:
        return None
    if spec is None or not spec.tool_calls:
        return None
    return cast(ToolHarness, harness_by_name(spec.name)).tool_schemas  # spec.tool_calls: a ToolHarness


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
