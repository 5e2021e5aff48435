"""The named Docker networks a local fleet's containers ask for: made when missing, removed after.

An instance row may name a network its tests need (the bundled `pytoolz__toolz-9004` names
``swe-rl-internal``: a connect timeout must hang, not fail at once). On a real node the operator
creates it (``docker network create --internal NAME``) and allows it (``SWE_EXEC_NETWORKS``); a
local fleet does both itself. A network it creates is internal (no egress: the tests get the
network trait, not the internet) and labelled with the creating process's pid; the fleet removes
what it created when it stops, and adopts (and so later removes) what a killed local fleet left.
A network that was already there is used as it is and kept.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

__all__ = ["LABEL_CREATOR", "allowed_networks", "make_networks", "remove_networks"]

LABEL_CREATOR = "swe-rl.local-fleet-pid"
"""Label of a network a local fleet created: the pid of the process that created it."""


def allowed_networks(*lists: str | Iterable[str] | None) -> str:
    """One ``SWE_EXEC_NETWORKS`` value: the names of comma-separated strings or lists, in order, once."""
    names: list[str] = []
    for item in lists:
        if not item:
            continue
        parts = item.split(",") if isinstance(item, str) else item
        names.extend(p.strip() for p in parts if p.strip())
    return ",".join(dict.fromkeys(names))


def _pid_alive(text: str) -> bool:
    try:
        os.kill(int(text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def make_networks(client: Any, names: Iterable[str]) -> list[str]:
    """Create each missing network (internal, labelled); return the ones this process now owns."""
    import docker

    owned = []
    for name in dict.fromkeys(names):
        try:
            net = client.networks.get(name)
        except docker.errors.NotFound:
            try:
                client.networks.create(
                    name,
                    driver="bridge",
                    internal=True,
                    check_duplicate=True,  # two fleets starting at once: one network, not two of one name
                    labels={LABEL_CREATOR: str(os.getpid())},
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
                continue  # another process made it just now: theirs
            owned.append(name)
            continue
        creator = (net.attrs.get("Labels") or {}).get(LABEL_CREATOR)
        if creator is not None and not _pid_alive(creator):
            owned.append(name)  # left by a local fleet that was killed: ours to remove now
    return owned


def remove_networks(client: Any, names: Iterable[str]) -> list[str]:
    """Remove the named networks; return those Docker kept (still in use by another process's containers)."""
    import docker

    kept = []
    for name in names:
        try:
            client.networks.get(name).remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            kept.append(name)
    return kept
