"""The client's direct calls: a lease's container operations sent to its node, not through the pool.

After an allocate the client holds the lease's node address and credential (`lease_credential.py`);
exec, diff, read_file, write_file and evaluate then go straight to the node with
``Authorization: Lease <credential>``. The pool is off their path (its CPU, its event loop, its
restarts); it still places, heartbeats, expires and closes leases. `EnvClientConfig.direct = False`
sends every call through the pool instead (workers that cannot reach the nodes).

Retries follow the client's policy (`Retry`): a call that changes the container is never repeated on
this path once sent (the pool's call replay does not exist here). A call that never reached the node
(`NodeNotReached`) goes through the pool instead: nothing ran, and the pool knows a draining node from a
dead one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from swe_rl.fleet.call_headers import LEASE_SCHEME
from swe_rl.fleet.client_config import EnvClientConfig
from swe_rl.fleet.errors import FleetError, FleetUnavailable, error_for
from swe_rl.fleet.retry import Retry, RetryPolicy, TryAgain, retry_async
from swe_rl.fleet.tls import client_context

if TYPE_CHECKING:
    from swe_rl.fleet.client import Lease

_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class NodeNotReached(Exception):
    """The direct call never reached the node (refused, no route, connect timeout): nothing ran. The
    caller sends it through the pool instead, which knows whether the node is down, draining for an
    update (it waits for the restart) or only unreachable from this worker."""


def node_client(config: EnvClientConfig) -> httpx.AsyncClient:
    """The HTTP client of direct calls: no pool token on it (a node never sees the client's token); an
    https:// node is checked against the client's CA file (`SWE_CLIENT_CA_FILE`, as the pool is)."""
    return httpx.AsyncClient(
        verify=client_context(config.ca_file) if config.ca_file else True,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        timeout=httpx.Timeout(config.read_timeout, connect=config.connect_timeout),
        trust_env=False,
    )


async def direct_call(
    http: httpx.AsyncClient,
    config: EnvClientConfig,
    lease: Lease,
    op: str,
    body: dict[str, Any],
    credential: str,
    *,
    timeout: float,
    retry: Retry,
) -> dict[str, Any]:
    """POST op on the lease's container to its node; the answer's JSON, or a FleetError subclass."""
    url = f"{lease.node.rstrip('/')}/container/{op}"
    payload = {**body, "container_id": lease.container_id}
    headers = {"Authorization": f"{LEASE_SCHEME}{credential}"}
    http_timeout = httpx.Timeout(timeout, connect=config.connect_timeout)
    failures = 0

    async def attempt() -> dict[str, Any]:
        nonlocal failures
        try:
            resp = await http.post(url, json=payload, headers=headers, timeout=http_timeout)
        except _NEVER_SENT as exc:
            raise NodeNotReached(f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            what = (
                "did not answer in time"
                if isinstance(exc, httpx.TimeoutException)
                else "is down or cut the call"
            )
            error: FleetError = FleetUnavailable(
                f"{op}: node {lease.node} of lease {lease.lease_id} {what}: {type(exc).__name__}: {exc}",
                body={"node": lease.node},
            )
            error.__cause__ = exc
            failures += 1
            if retry is Retry.SAFE and failures <= config.retries:
                raise TryAgain(error) from exc
            raise error from exc
        data = _json_or_text(resp)
        if resp.status_code == 200:
            return data
        status = resp.status_code
        if status == 404 and str(data.get("error", "")).startswith("unknown container"):
            status, data = (
                410,
                {**data, "lease_id": lease.lease_id, "lease_lost": True},
            )  # as the pool says it
        error = error_for(op, status, data)
        if retry is Retry.SAFE and status in (502, 503, 504):
            failures += 1
            if failures <= config.retries:
                raise TryAgain(error)
        raise error

    policy = RetryPolicy(
        retries=None,
        deadline=config.retries * config.backoff_max + 1.0,
        backoff=config.backoff,
        backoff_max=config.backoff_max,
        jitter=True,
    )
    return await retry_async(attempt, policy, name=op)


def _json_or_text(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {"error": resp.text[:500]}
