"""Which Docker network a container gets: none, Docker's default, or a named (allowlisted) one.

Grading stays isolated unless asked: some instances' tests need a network *trait* (a
connect timeout to a non-routable address must hang, not fail with "Network is
unreachable"), which an internal no-egress Docker network gives without giving the
internet. Exec servers only accept names listed in their ``SWE_EXEC_NETWORKS``.

Precedence for one container: the run's explicit choice (``--grading-network``,
``--agent-network``, ``swe_grading_network``, ``swe_container_options.network``), else the
instance row's ``network`` field, else none.
"""

from __future__ import annotations

from typing import Any

from swe_rl.tasks.instance import TaskInstance

__all__ = ["Network", "network_for", "parse_network"]

Network = bool | str
"""False: no network; True: Docker's default bridge; a string: that named Docker network."""


def parse_network(value: Any) -> Network | None:
    """A CLI/YAML/row value as a `Network`; None when unset (empty string or None)."""
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError(f"network must be a string or a boolean, got {type(value).__name__}")
    text = value.strip()
    if not text:
        return None
    lowered = text.lower()
    if lowered in ("none", "false", "off", "0", "isolated"):
        return False
    if lowered in ("default", "bridge", "true", "on", "1"):
        return True
    return text


def network_for(instance: TaskInstance, chosen: Any = None) -> Network:
    """The run's choice when it made one, else the instance row's ``network``, else none."""
    explicit = parse_network(chosen)
    if explicit is not None:
        return explicit
    row = parse_network(instance.extra.get("network"))
    return row if row is not None else False
