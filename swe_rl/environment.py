"""`FleetEnvironment`: the `Environment` protocol over a pool lease.

    async with fleet_environment(client, instance) as env:
        result = await env.exec("ls", timeout=60)

An `EnvFactory` is any callable that opens an environment for an instance as an async
context manager; the agent takes one, so other sandboxes plug in the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from swe_rl.fleet.client import EnvClient, ExecResult, Lease
from swe_rl.fleet.errors import BadRequest
from swe_rl.networks import network_for
from swe_rl.protocols import Environment
from swe_rl.tasks import TaskInstance

__all__ = ["EnvFactory", "FleetEnvironment", "fleet_env_factory", "fleet_environment", "record_baseline"]

log = logging.getLogger(__name__)

EnvFactory = Callable[[TaskInstance], AbstractAsyncContextManager[Environment]]
"""Opens (and on exit releases) an environment for one instance."""


class FleetEnvironment:
    """One leased container; every call raises `LeaseLost` once the heartbeat learned it is gone."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def __repr__(self) -> str:
        return f"FleetEnvironment({self.lease!r})"

    @property
    def workdir(self) -> str:
        return self.lease.workdir

    def _check(self) -> None:
        if self.lease.lost is not None:
            raise self.lease.lost

    async def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        self._check()
        return await self.lease.exec(command, timeout=timeout)

    async def diff(self) -> str:
        self._check()
        return await self.lease.diff()

    async def record_baseline(self) -> str:
        self._check()
        return await self.lease.record_baseline()

    async def write_file(self, path: str, data: str | bytes) -> None:
        self._check()
        await self.lease.write_file(path, data)

    async def read_file(self, path: str) -> bytes:
        self._check()
        return await self.lease.read_file(path)

    async def close(self) -> None:
        await self.lease.close()


@contextlib.asynccontextmanager
async def fleet_environment(client: EnvClient, instance: TaskInstance, **opts: Any) -> AsyncIterator[FleetEnvironment]:
    """Lease a container of the instance's image (opts: network, memory, cpus, ...); always released.
    Without a ``network`` option the instance row's ``network`` (if any) applies."""
    opts = {**opts, "network": network_for(instance, opts.get("network"))}
    async with client.lease(instance.image, instance_id=instance.instance_id, workdir=instance.workdir,
                            **opts) as lease:
        yield FleetEnvironment(lease)


async def record_baseline(env: Any) -> str | None:
    """Episode start: record what the repo holds before the agent acts (see swe_rl/fleet/patch_baseline.py),
    so the patch is the agent's changes only. Environments without the call are left as they are; a
    repo the baseline cannot be taken in (no git work tree) is logged and diffs as before."""
    record = getattr(env, "record_baseline", None)
    if record is None:
        return None
    try:
        return await record()
    except BadRequest as exc:
        log.warning("no patch baseline in %r: %s", env, exc)
        return None


def fleet_env_factory(client: EnvClient, **opts: Any) -> EnvFactory:
    """An `EnvFactory` leasing from `client` with the given allocate options."""

    def open_env(instance: TaskInstance) -> AbstractAsyncContextManager[Environment]:
        return fleet_environment(client, instance, **opts)

    return open_env
