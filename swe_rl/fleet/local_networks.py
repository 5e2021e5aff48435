"""The named Docker networks a local fleet's containers ask for: made when missing, removed after.

An instance row may name a network its tests need (the bundled `pytoolz__toolz-9004` names
``swe-rl-internal``: a connect timeout must hang, not fail at once). On a real node the operator
creates it (``docker network create --internal NAME``) and allows it (``SWE_EXEC_NETWORKS``); a
local fleet does both itself. A network it creates is internal (no egress: the tests get the
network trait, not the internet) and labelled with the creating process's pid. Several local fleets
on one machine share it (two eval runs, two test runs side by side): each one using it writes its name
(pid and token) in the network's users file (`users_dir`, under a lock), and the last one to stop removes it, whoever
made it. Why: the maker removed it at its stop while another fleet was between two episodes on it, and
that fleet's next allocate found no network (seen in a side-by-side pair of test runs). A network no
local fleet made (no label) is used as it is and kept; pids of fleets that died are dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["LABEL_CREATOR", "allowed_networks", "make_networks", "new_user", "remove_networks", "users_dir"]

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


def users_dir() -> Path:
    """Where each shared network's users file lives: ``SWE_LOCAL_NETWORKS_DIR``, else
    ``$XDG_CACHE_HOME`` (``~/.cache``) ``/swe-rl/local-networks``."""
    if os.environ.get("SWE_LOCAL_NETWORKS_DIR"):
        return Path(os.environ["SWE_LOCAL_NETWORKS_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swe-rl" / "local-networks"


@contextlib.contextmanager
def _users(name: str) -> Iterator[set[str]]:
    """The live users of network `name` (``<pid>-<token>``), under an exclusive lock; what the body
    leaves is written back, and the file removed when no one is left (nothing piles up)."""
    folder = users_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.users"
    while True:
        fh = open(path, "a+", encoding="ascii")  # closed below, after the lock's work
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        try:
            same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()  # the last user removed this file while we waited for its lock: take the new one
    with fh:
        fh.seek(0)
        users = {u for u in fh.read().split() if _pid_alive(u.split("-")[0])}
        yield users
        if users:
            fh.seek(0)
            fh.truncate()
            fh.write("".join(f"{u}\n" for u in sorted(users)))
        else:
            path.unlink()


def new_user() -> str:
    """One fleet's name in the users files: its process and a token (two fleets of one process differ)."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def make_networks(client: Any, names: Iterable[str], user: str) -> list[str]:
    """Use each network as `user` (`new_user`), creating it when missing (internal, labelled); return
    the ones to release with `remove_networks`: those a local fleet made, now or before."""
    import docker

    used = []
    for name in dict.fromkeys(names):
        with _users(name) as users:
            try:
                net = client.networks.get(name)
            except docker.errors.NotFound:
                try:
                    client.networks.create(
                        name,
                        driver="bridge",
                        internal=True,
                        check_duplicate=True,  # fleets of other users (another lock file): one network
                        labels={LABEL_CREATOR: str(os.getpid())},
                    )
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:
                        raise
                    continue  # made just now by a process that does not share our lock: theirs
            else:
                if LABEL_CREATOR not in (net.attrs.get("Labels") or {}):
                    continue  # no local fleet made it: used as it is and kept
            users.add(user)  # a local fleet's: shared, the last user removes it
            used.append(name)
    return used


def remove_networks(client: Any, names: Iterable[str], user: str) -> list[str]:
    """Stop using the named networks, removing each one no other live local fleet uses; return those
    Docker kept (still in use by another process's containers)."""
    import docker

    kept = []
    for name in names:
        with _users(name) as users:
            users.discard(user)
            if users:
                continue  # another local fleet still uses it: the last one removes it
            try:
                client.networks.get(name).remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                kept.append(name)
    return kept
