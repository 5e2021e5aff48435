"""`open_fleet`: one fleet client and what an episode needs of it, built in one place.

    async with open_fleet(FleetConfig(grading=GraderConfig(eval_timeout=900))) as fleet:
        result = await run_instance(inst, policy, harness, client=fleet.client,
                                    env_factory=fleet.env_factory, grader=fleet.grader)

The slime layer, eval, certification and grade-predictions all go through it, so a change to how
the fleet is reached (another client setting, another grader, another environment) is made here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swe_rl.agent.fleet_environment import fleet_env_factory
from swe_rl.agent.protocols import EnvFactory
from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.fleet import FleetGrader

__all__ = ["FleetConfig", "FleetSession", "open_fleet"]


@dataclass
class FleetConfig:
    """How to reach the fleet and what to ask of it."""

    client: EnvClientConfig = field(default_factory=EnvClientConfig.from_env)
    """Pool URL, token, retries (default: the `SWE_POOL_*` / `SWE_CLIENT_*` variables)."""
    grading: GraderConfig = field(default_factory=GraderConfig)
    """How patches are graded in a fresh container."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Allocate options of the agent's containers (memory, cpus, network, ...)."""

    @classmethod
    def for_pool(cls, pool_env: dict[str, str] | None = None, **kw: Any) -> FleetConfig:
        """The client settings of the environment, with the pool of a local fleet (`SWE_POOL_URL`,
        `SWE_POOL_TOKEN` of `pool_env`) when there is one."""
        given = (
            {"pool_url": pool_env["SWE_POOL_URL"], "token": pool_env["SWE_POOL_TOKEN"]} if pool_env else {}
        )
        return cls(client=EnvClientConfig.from_env(None, **given), **kw)


class FleetSession:
    """One `EnvClient`, the `EnvFactory` leasing the agent's containers from it, and the grader."""

    def __init__(self, config: FleetConfig, client: EnvClient | None = None) -> None:
        self.config = config
        self._owns_client = client is None
        self.client = client if client is not None else EnvClient(config.client)
        self.env_factory: EnvFactory = fleet_env_factory(self.client, **config.env_options)
        self.grader = FleetGrader(self.client, config.grading)

    def with_config(self, config: FleetConfig) -> FleetSession:
        """Another session on the same client (other grading or allocate options); closing it leaves the
        client open."""
        return FleetSession(config, self.client)

    async def close(self) -> None:
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> FleetSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def open_fleet(config: FleetConfig | None = None) -> FleetSession:
    """The fleet session of `config` (default: everything from the environment); close it, or use
    it as an async context manager."""
    return FleetSession(config or FleetConfig())
