"""The catalogue of every fleet variable: the `SWE_*` variables of each env-configured object of the fleet.

A module of its own (not in `settings`): it imports the objects whose variables it lists, and each of
them imports `settings`, so the catalogue in `settings` would make an import circle.
"""

from __future__ import annotations

from swe_rl.fleet.client import CLIENT_ENV
from swe_rl.fleet.exec.config import ENV as EXEC_ENV
from swe_rl.fleet.pool.config import ENV as POOL_ENV
from swe_rl.fleet.sandbox import AGENT_GENERATE_ENV, SANDBOX_ENV
from swe_rl.fleet.settings import EnvVar

__all__ = ["fleet_env_vars"]


def fleet_env_vars() -> dict[str, dict[str, EnvVar]]:
    """The variables of every env-configured object of the fleet, by object."""
    return {
        "exec server": EXEC_ENV,
        "pool server": POOL_ENV,
        "client": CLIENT_ENV,
        "sandbox": SANDBOX_ENV,
        "slime agent generate": AGENT_GENERATE_ENV,
    }
