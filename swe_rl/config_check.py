"""Warnings for plugin settings that do nothing: a misspelt ``swe_*`` key or ``SWE_*`` variable.

slime sets every key of the ``--custom-config-path`` YAML on ``args`` without checking it, so a typo
(``swe_step_limt: 30``) would silently leave the default in place. `unknown_settings` lists every
``swe_*`` attribute of ``args`` the plugin does not read, and every ``SWE_*`` variable that looks like
the plugin's (the ``SWE_PRM_`` / ``SWE_PIVOT_`` groups, or close to one of its names) but is not one,
each with the nearest valid name. Variables of the fleet and other tools (``SWE_POOL_*``,
``SWE_EXEC_*``, ``SWE_CLIENT_*``, ...) are not the plugin's and are left alone. `warn_unknown_settings`
logs each once per process.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

__all__ = ["known_names", "unknown_settings", "warn_unknown_settings"]

log = logging.getLogger(__name__)
_GROUP_PREFIXES = ("SWE_PRM_", "SWE_PIVOT_")
_warned: set[str] = set()
_checked: set[tuple[Any, ...]] = set()


def known_names(config_class: type[BaseModel]) -> set[str]:
    """Every ``swe_*`` key the plugin reads on args (lower case; the variables are the same, upper case)."""
    names: set[str] = set()
    for name, info in config_class.model_fields.items():
        names.add(f"swe_{name}")
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            names.update(f"swe_{name}_{key}" for key in info.annotation.model_fields)
    return names


def _nearest(name: str, candidates: set[str], cutoff: float = 0.6) -> str | None:
    found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=cutoff)
    return found[0] if found else None


def unknown_settings(config_class: type[BaseModel], args: Any, env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``(unknown name, nearest valid name or None)`` for args keys and plugin-looking variables."""
    known = known_names(config_class)
    out: list[tuple[str, str | None]] = []
    for key in sorted(vars(args) if args is not None and hasattr(args, "__dict__") else ()):
        if key.startswith("swe_") and key not in known:
            out.append((key, _nearest(key, known)))
    known_env = {k.upper() for k in known}
    for var in sorted(env):
        if not var.startswith("SWE_") or var in known_env:
            continue
        near = _nearest(var, known_env, cutoff=0.85)
        if var.startswith(_GROUP_PREFIXES) or near is not None:
            out.append((var, near or _nearest(var, known_env)))
    return out


def warn_unknown_settings(config_class: type[BaseModel], args: Any, env: Mapping[str, str]) -> list[str]:
    """Log a warning per unknown setting (once per process); returns the messages logged now."""
    keys = vars(args) if hasattr(args, "__dict__") else {}
    seen = (config_class, tuple(sorted(k for k in keys if k.startswith("swe_"))),
            tuple(sorted(k for k in env if k.startswith("SWE_"))))
    if seen in _checked:  # called on every rollout: look once per distinct set of names
        return []
    _checked.add(seen)
    messages = []
    for name, near in unknown_settings(config_class, args, env):
        if name in _warned:
            continue
        _warned.add(name)
        source = "environment variable" if name.isupper() else "key (from --custom-config-path or args)"
        hint = f"; did you mean {near}?" if near else ""
        messages.append(f"unknown swe-rl plugin {source} {name} is ignored{hint}")
        log.warning(messages[-1])
    return messages
