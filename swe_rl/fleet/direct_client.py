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

The calls go over the pool's lean wire (`pool/node_wire.py`: one request in one write, kept-alive
connections per node; 0.30 against 1.72 ms of CPU per call over httpx, bench/route_bench.py), so they
follow its rule for a stale connection: a kept-alive connection that breaks before one byte of the
answer is sent once more on a fresh connection rather than failing the call. Why that never runs a call
twice, though the exec server has no request ids (call replay is the pool's, not the node's): the
connection had carried a whole answer and sat idle, and an HTTP/1.1 server (waitress) closes such a
connection only between requests (its idle timeout, its shutdown), without reading what arrives on it;
a node that read the call and then died mid-way also ends the connection without a byte, but then the
fresh connection finds nothing listening (a restart takes seconds, the resend follows at once) and that
refusal is a `FleetUnavailable`, not a `NodeNotReached`: it is not sent again through the pool, which
would send it to the restarted node. A break after part of an answer is never resent.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.call_headers import LEASE_SCHEME
from swe_rl.fleet.client_config import EnvClientConfig
from swe_rl.fleet.errors import FleetError, FleetUnavailable, error_for
from swe_rl.fleet.pool.node_wire import (
    NodeAnswer,
    NodeWire,
    WireConnectTimeout,
    WireError,
    WireNoConnection,
    WireRefused,
    WireTimeout,
)
from swe_rl.fleet.retry import Retry, RetryPolicy, TryAgain, retry_async
from swe_rl.fleet.tls import client_context

if TYPE_CHECKING:
    from swe_rl.fleet.client import Lease

KEEP_PER_NODE = 32
"""Idle connections kept per node (a client's calls in flight on one node are few; a burst past it opens
and closes connections, measured as 16% of a loaded bench client's CPU at 16). An idle connection costs
the node a question per turn of its loop (waitress asks every channel), so they do not stay long:
`IDLE_SECONDS`."""
IDLE_SECONDS = 20.0
"""Seconds an idle direct connection is kept (the pool's wire keeps them 60 s; the node closes them at
120 s): a client whose calls moved to other leases' nodes leaves no connections behind for long."""

Observer = Callable[[str, float, NodeAnswer], None]
"""Told of each direct answer: (op, seconds from sending to the answer read, the answer)."""


class NodeNotReached(Exception):
    """The direct call never reached the node (refused, no route, connect timeout): nothing ran. The
    caller sends it through the pool instead, which knows whether the node is down, draining for an
    update (it waits for the restart) or only unreachable from this worker."""


class NodeWires:
    """The connections of direct calls, one `NodeWire` per node: no pool token on them (a node never sees
    the client's token; each call carries its lease's credential); an https:// node is checked against
    the client's CA file (`SWE_CLIENT_CA_FILE`, as the pool is), else the system's CAs."""

    def __init__(self, config: EnvClientConfig) -> None:
        self.config = config
        self._ssl: ssl.SSLContext | None = None
        self.wires: dict[str, NodeWire] = {}
        self.observe: Observer | None = None
        """Set by a bench to see each answer's timing (bench/replica_bench.py: the paired overhead)."""

    def of(self, url: str) -> NodeWire:
        wire = self.wires.get(url)
        if wire is None:
            if self._ssl is None and url.startswith("https:"):
                self._ssl = client_context(self.config.ca_file)
            wire = self.wires[url] = NodeWire(
                url,
                None,
                ssl_context=self._ssl,
                connect_timeout=self.config.connect_timeout,
                keep=KEEP_PER_NODE,
                expiry=IDLE_SECONDS,
            )
        return wire

    def close(self) -> None:
        for wire in self.wires.values():
            wire.close()
        self.wires.clear()


def node_wires(config: EnvClientConfig) -> NodeWires:
    """The client's direct-call connections (`NodeWires`)."""
    return NodeWires(config)


async def direct_call(
    wires: NodeWires,
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
    path = f"/container/{op}"
    payload = {**body, "container_id": lease.container_id}
    authorization = f"{LEASE_SCHEME}{credential}"
    failures = 0

    async def attempt() -> dict[str, Any]:
        nonlocal failures
        wire = wires.of(lease.node)
        sent = time.monotonic()
        try:
            resp = await wire.post(path, payload, timeout, authorization=authorization)
        except (WireRefused, WireConnectTimeout, WireNoConnection) as exc:
            if not exc.resent:  # the first connection was never made: nothing was sent
                raise NodeNotReached(f"{type(exc).__name__}: {exc}") from exc
            what = "refused the fresh connection after a kept-alive one broke (the call may have run)"
            error: FleetError = FleetUnavailable(
                f"{op}: node {lease.node} of lease {lease.lease_id} {what}: {type(exc).__name__}: {exc}",
                body={"node": lease.node},
            )
            failures += 1
            if retry is Retry.SAFE and failures <= config.retries:
                raise TryAgain(error) from exc
            raise error from exc
        except WireError as exc:
            what = "did not answer in time" if isinstance(exc, WireTimeout) else "is down or cut the call"
            error = FleetUnavailable(
                f"{op}: node {lease.node} of lease {lease.lease_id} {what}: {type(exc).__name__}: {exc}",
                body={"node": lease.node},
            )
            error.__cause__ = exc
            failures += 1
            if retry is Retry.SAFE and failures <= config.retries:
                raise TryAgain(error) from exc
            raise error from exc
        if wires.observe is not None:
            wires.observe(op, time.monotonic() - sent, resp)
        data = _json_or_text(resp)
        if resp.status_code == 200:
            return data
        if resp.status_code == 503 and data.get("not_started") is True:  # a node ending its drain
            raise NodeNotReached(f"node {lease.node} refused the call unstarted: {data.get('error')}")
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


def _json_or_text(resp: NodeAnswer) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {"error": resp.text[:500]}
