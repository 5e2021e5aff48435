"""`FleetEnvironment`: the `Environment` protocol over a pool lease.

    async with fleet_environment(client, instance) as env:
        result = await env.exec("ls", timeout=60)

An `EnvFactory` (`swe_rl.agent.protocols`) is any callable that opens an environment for an
instance as an async context manager; the agent takes one, so other sandboxes plug in the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from swe_rl.agent.protocols import EnvFactory, Environment
from swe_rl.fleet.client import EnvClient, ExecResult, Lease
from swe_rl.fleet.snapshot_protocol import SnapshotInfo
from swe_rl.tasks.instance import TaskInstance
from swe_rl.tasks.networks import network_for

__all__ = ["FleetEnvironment", "fleet_env_factory", "fleet_environment"]


class FleetEnvironment:
    """One leased container; every call raises `LeaseLost` once the heartbeat learned it is gone."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def __repr__(self) -> str:
        return f"FleetEnvironment({self.lease!r})"

    @property
    def workdir(self) -> str:
        return self.lease.workdir

    @property
    def warm(self) -> bool | None:
        return self.lease.warm

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

    async def snapshot(self, extra_paths: list[str] | None = None) -> SnapshotInfo:
        """The container's state as a snapshot id (`swe_rl.agent.fork`)."""
        self._check()
        return await self.lease.snapshot(extra_paths)

    async def close(self) -> None:
        await self.lease.close()


@contextlib.asynccontextmanager
async def fleet_environment(
    client: EnvClient, instance: TaskInstance, **opts: Any
) -> AsyncIterator[FleetEnvironment]:
    """Lease a container of the instance's image (opts: network, memory, cpus, ...); always released.
    Without a ``network`` option the instance row's ``network`` (if any) applies."""
    opts = {**opts, "network": network_for(instance, opts.get("network"))}
    async with client.lease(
        instance.image, instance_id=instance.instance_id, workdir=instance.workdir, **opts
    ) as lease:
        yield FleetEnvironment(lease)


def fleet_env_factory(client: EnvClient, **opts: Any) -> EnvFactory:
    """An `EnvFactory` leasing from `client` with the given allocate options."""

    def open_env(instance: TaskInstance) -> AbstractAsyncContextManager[Environment]:
        return fleet_environment(client, instance, **opts)

    return open_env
