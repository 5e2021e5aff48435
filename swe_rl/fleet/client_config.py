"""The client's settings: how to reach the pool, how long to wait, how often to retry and heartbeat.

`EnvClientConfig` is read from the environment by `from_env` (`CLIENT_ENV`: `SWE_CLIENT_<FIELD>`, and
the pool's address and token under the names the pool's own settings use), so a rollout worker and
the pool agree on one spelling. `swe_rl.fleet.client` re-exports both; docs/fleet.md "Client settings"
documents every variable (tests/test_readme_settings.py keeps them in step).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.fleet.settings import EnvVar, field_types, prefixed, read_env
from swe_rl.fleet.tls import client_context, require_https

__all__ = ["CLIENT_ENV", "EnvClientConfig", "pool_tls", "verify_for"]


class EnvClientConfig(BaseModel):
    """How to reach the pool; `from_env()` reads `SWE_POOL_URL`, `SWE_POOL_TOKEN` and `SWE_CLIENT_<FIELD>`."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    pool_url: str = "http://127.0.0.1:18090"
    """Pool server URL (`SWE_POOL_URL`); several, comma-separated, for pool replicas sharing one lease record:
    a call that cannot reach one (or whose connection drops) is retried on the next."""
    token: str = Field(default="", repr=False)
    """Bearer token of the pool (`SWE_POOL_TOKEN`, or the file named by `SWE_POOL_TOKEN_FILE`)."""
    ca_file: str = ""
    """CA file (PEM) the pool's certificate is checked against when `pool_url` is https:// (`SWE_CLIENT_CA_FILE`);
    unset: the system's CAs. Set, an http:// `pool_url` off loopback is refused (the token would cross in clear
    text)."""
    connect_timeout: float = 10.0
    """Seconds to connect to the pool."""
    read_timeout: float = 120.0
    """Seconds to wait for the answer to a short call (allocate, heartbeat, diff, files, close)."""
    call_margin: float = 60.0
    """Seconds added to a command's own timeout for the HTTP call carrying it (above the pool's margin)."""
    exec_timeout: float = 180.0
    """Command timeout when exec() is given none."""
    eval_timeout: float = 1800.0
    """Test-run timeout when evaluate() is given none."""
    retries: int = 4
    """Retries after the first attempt, for calls that are safe to repeat."""
    backoff: float = 0.5
    """First retry delay in seconds; doubles each retry (with jitter) up to backoff_max."""
    backoff_max: float = 10.0
    """Longest delay between two retries."""
    heartbeat_interval: float = 30.0
    """Seconds between background heartbeats of a `lease()`; keep it well under the pool's lease TTL."""
    allocate_deadline: float = 600.0
    """Seconds allocate keeps retrying a full or unavailable fleet before giving up."""
    direct: bool = True
    """Call a lease's node directly with the lease's credential (`SWE_CLIENT_DIRECT`): the pool is off the
    path of exec, diff, files and evaluate, and a pool restart interrupts none of them. Set it to 0 where
    the workers cannot reach the nodes: every call then goes through the pool."""
    restart_grace: float = 30.0
    """Seconds a call keeps trying, about twice a second, while the pool refuses connections (a pool
    restarting); such attempts never reached the pool, so they do not count against `retries`. 0: off."""

    def pool_urls(self) -> list[str]:
        """The pool's URLs: one, or each replica's."""
        urls = [u.strip().rstrip("/") for u in self.pool_url.split(",") if u.strip()]
        if not urls:
            raise ValueError("pool_url names no pool server")
        return urls

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> EnvClientConfig:
        """Defaults < the variables of `CLIENT_ENV` (from `env`, default the process environment) < overrides."""
        return cls(**{**read_env(CLIENT_ENV, field_types(cls), env), **overrides})


CLIENT_ENV: dict[str, EnvVar] = prefixed(
    "SWE_CLIENT_",
    EnvClientConfig.model_fields,
    pool_url=EnvVar("SWE_POOL_URL"),
    token=EnvVar("SWE_POOL_TOKEN", file="SWE_POOL_TOKEN_FILE", parse=str.strip),
)
"""The variable of each `EnvClientConfig` field: `SWE_CLIENT_<FIELD>`, and the pool's address and token
under the names the pool's own settings use (`SWE_POOL_URL`, `SWE_POOL_TOKEN` / `SWE_POOL_TOKEN_FILE`)."""


def pool_tls(config: EnvClientConfig) -> ssl.SSLContext | bool:
    """httpx's `verify` for the pool (`verify_for`)."""
    return verify_for(config.pool_url, config.ca_file, "SWE_POOL_URL")


def verify_for(url: str, ca_file: str, setting: str) -> ssl.SSLContext | bool:
    """How a client checks the server at `url`: an https:// one against `ca_file` (else the system's
    CAs). A CA file with an http:// URL off loopback is a ValueError naming `setting`: where TLS was
    meant, the token must not cross in clear text. For every client of the fleet's servers (the pool's
    clients, and clients that reach nodes directly, with the same CA file)."""
    if not url.lower().startswith("https://"):
        if ca_file:
            require_https([url], setting, "SWE_CLIENT_CA_FILE is set")
        return True
    return client_context(ca_file)
