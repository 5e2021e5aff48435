"""Calls from the pool to the exec servers: connection shards, timeouts, and forwarding a lease's ops.

A refused connection marks the node down at once (503) and a call that outlives its timeout is a 504,
so a caller never hangs on a dead node. A routed call's HTTP timeout is the command's own timeout
(explicit, so a node's default cannot outlast it) plus the pool's margin.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from starlette.responses import Response

from swe_rl.fleet.call_headers import NODE_SECONDS_HEADER, NODE_WAIT_HEADER
from swe_rl.fleet.pool.node_wire import (
    NodeAnswer,
    NodeWire,
    WireConnectTimeout,
    WireError,
    WireRefused,
    WireTimeout,
)
from swe_rl.fleet.protocol import EVAL_APPLY_ALLOWANCE, PLAIN_CALL_TIMEOUT, ROUTED_CALLS, ApiError
from swe_rl.fleet.tls import client_context

if TYPE_CHECKING:
    from swe_rl.fleet.pool.nodes import Node, NodeSet
    from swe_rl.fleet.pool.store import LeaseRecord

log = logging.getLogger("swe_pool_server")
AnswerT = TypeVar("AnswerT")

ROUTED_OPS = tuple(ROUTED_CALLS)
"""Container operations a lease holder calls through the pool (`POST /<op>`)."""
DEFAULT_EXEC_TIMEOUT = 180.0
KEEPALIVE_PER_CLIENT = 8
"""Idle connections kept per HTTP client (a node has `connection_shards` of them)."""
KEEPALIVE_EXPIRY = 60.0
"""Seconds an idle connection to a node is kept (waitress closes idle channels after 120 s)."""
DEFAULT_EVAL_TIMEOUT = 1800.0


Answer = httpx.Response | NodeAnswer
"""A node's answer, from httpx or the lean client of the per-lease calls (`node_wire.py`)."""
_CONNECT_TIMEOUTS = (httpx.ConnectTimeout, WireConnectTimeout)
_TIMEOUTS = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout, WireTimeout)
_FAILURES = (httpx.HTTPError, WireError)


def json_of(resp: Answer) -> dict[str, Any]:
    """The JSON object an exec server answered, or a 502 when it answered something else."""
    try:
        data = resp.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ApiError(
            502, f"exec server answered {resp.status_code} without a JSON object: {resp.text[:200]!r}"
        )
    return data


def _number(value: Any, default: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value > 0
    return float(value) if ok else default


def call_timeout(op: str, payload: dict[str, Any]) -> float:
    """Seconds the node may take for op; sets the command's timeout in payload when it has none."""
    if op not in ("exec", "evaluate"):
        return PLAIN_CALL_TIMEOUT
    default = DEFAULT_EXEC_TIMEOUT if op == "exec" else DEFAULT_EVAL_TIMEOUT
    if payload.get("timeout") is None:
        payload["timeout"] = default
    return _number(payload["timeout"], default) + (EVAL_APPLY_ALLOWANCE if op == "evaluate" else 0.0)


class NodeCalls:
    """HTTP clients to the exec servers: one for health checks, a few connection shards per node."""

    def __init__(
        self,
        urls: list[str],
        nodes: NodeSet,
        token: str,
        *,
        connect_timeout: float,
        shards: int,
        ca_file: str = "",
    ) -> None:
        self.urls, self.nodes, self.token, self.ca_file = urls, nodes, token, ca_file
        self.connect_timeout, self.shards = connect_timeout, max(1, shards)
        self.http: httpx.AsyncClient | None = None
        """Client of health checks, image lists and reconciliation."""
        self.node_http: dict[str, list[httpx.AsyncClient]] = {}
        self.health_http: dict[str, httpx.AsyncClient] = {}
        """One client per node for health checks and image lists: httpcore scans every connection of a
        pool on each request, so one client holding a connection to each of 200 nodes made every health
        pass quadratic in the number of nodes (most of the pool's CPU at 200 nodes)."""
        self.wires: dict[str, NodeWire] = {}
        """The lean client of each node's routed calls (`route_post`)."""
        self.health_wires: dict[str, NodeWire] = {}
        """The lean client of each node's health checks (`health_wire_of`)."""
        self._shard_counter = itertools.count()
        self._ssl: ssl.SSLContext | None = None

    def open(self) -> None:
        # One context shared by every client; the CA store is loaded only when a node speaks TLS (it took
        # up to 2 s of a loaded machine, on the restart's critical path).
        tls = any(url.startswith("https:") for url in self.urls)
        # Chain and name checked, against the nodes' CA when one is set (`PoolConfig.exec_ca_file`).
        self._ssl = client_context(self.ca_file) if tls else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.http = self._new_client()
        # Small connection pools, several per node: httpcore's pool spends time in proportion to its
        # connections on every request, which a single pool holding thousands turns quadratic.
        # The per-node clients are made on first use (`shards_of`, `health_of`): 1,800 clients for 200
        # nodes took a second or more of a restart, before the pool could serve.

    async def aclose(self) -> None:
        shards = (c for clients in self.node_http.values() for c in clients)
        for client in [self.http, *shards, *self.health_http.values()]:
            if client is not None:
                await client.aclose()
        for wire in [*self.wires.values(), *self.health_wires.values()]:
            wire.close()

    def shards_of(self, url: str) -> list[httpx.AsyncClient]:
        """The connection shards of a node's calls."""
        shards = self.node_http.get(url)
        if shards is None:
            shards = self.node_http[url] = [self._new_client() for _ in range(self.shards)]
        return shards

    def health_of(self, url: str) -> httpx.AsyncClient:
        """The client of a node's image lists and reconciliation (its health checks: `health_wire_of`)."""
        client = self.health_http.get(url)
        if client is None:
            client = self.health_http[url] = self._new_client()
        return client

    def health_wire_of(self, url: str, timeout: float) -> NodeWire:
        """The lean client of a node's health checks (connecting within the check's own timeout). Why not
        httpx: a check over httpx cost ~3 ms of the pool's CPU, and 200 nodes every 5 s were three
        quarters of an idle pool's time (sampled: 17% of a core holding 20,000 leases)."""
        wire = self.health_wires.get(url)
        if wire is None:
            wire = self.health_wires[url] = NodeWire(
                url, self.token, ssl_context=self._ssl, connect_timeout=timeout
            )
        return wire

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            verify=self._ssl if self._ssl is not None else True,
            # The nodes are reached directly: no proxy or CA file from the environment. With trust_env, each
            # client loaded SSL_CERT_FILE into the shared context again: 5-45 ms per client, x 9 clients per
            # node, paid on first use (most of it right after a restart).
            trust_env=False,
            headers={"Authorization": f"Bearer {self.token}"},
            # Reuse connections (no reconnect storms), but keep few idle ones per client: httpcore
            # compares every idle connection with every other on each request (quadratic), so the
            # connections a burst opened would slow every later call of that client.
            # Idle connections live a minute (httpx's default is 5 s, under the exec server's 120 s): with
            # 200 nodes x 8 shards, each shard sees a call every few seconds, and a 5 s expiry made
            # nearly every routed call open a new TCP connection (pool and node CPU alike).
            limits=httpx.Limits(
                max_connections=None,
                max_keepalive_connections=KEEPALIVE_PER_CLIENT,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            ),
            timeout=httpx.Timeout(PLAIN_CALL_TIMEOUT, connect=self.connect_timeout),
        )

    async def post(self, node: Node, path: str, payload: dict[str, Any], timeout: float) -> httpx.Response:
        """POST to a node with httpx; errors as in `_sent`."""
        shards = self.shards_of(node.url)
        http = shards[next(self._shard_counter) % len(shards)]
        http_timeout = httpx.Timeout(timeout, connect=self.connect_timeout)
        return await self._sent(
            node, path, timeout, lambda: http.post(node.url + path, json=payload, timeout=http_timeout)
        )

    async def route_post(self, node: Node, path: str, payload: dict[str, Any], timeout: float) -> NodeAnswer:
        """POST to a node over the lean client (`node_wire.py`); errors as in `_sent`.

        Used by the routed calls, creates and destroys: the calls made per lease. Measured with
        bench/scale_bench.py (5,000 leases, two runs back to back): creates and destroys over it took
        13.6 and 5.6 s of pool CPU against 26.2 and 19.4 s over httpx."""
        wire = self.wires.get(node.url)
        if wire is None:
            wire = self.wires[node.url] = NodeWire(
                node.url, self.token, ssl_context=self._ssl, connect_timeout=self.connect_timeout
            )
        return await self._sent(node, path, timeout, lambda: wire.post(path, payload, timeout))

    async def _sent(
        self, node: Node, path: str, timeout: float, send: Callable[[], Awaitable[AnswerT]]
    ) -> AnswerT:
        """send()'s answer; a refused connection marks the node down at once (503), a timeout is a 504.

        A connect timeout means an overloaded node more often than a dead one (a busy node's accept
        queue): the request was never sent, so it is tried again while the call's own time allows and
        the health checks still hold the node up; only then is it a 503 (`node_down`).
        """
        deadline = time.monotonic() + timeout
        tries = 0
        try:
            while True:
                tries += 1
                try:
                    return await send()
                except _CONNECT_TIMEOUTS:
                    if tries > 1 and (not node.healthy or time.monotonic() + self.connect_timeout > deadline):
                        raise
                    log.info(
                        "%s accepted no connection within %gs (try %d)", node.url, self.connect_timeout, tries
                    )
        except _TIMEOUTS as exc:
            raise ApiError(
                504, f"node {node.url} did not answer {path} within {timeout:.0f}s", node=node.url
            ) from exc
        except _CONNECT_TIMEOUTS as exc:
            log.warning("%s accepted no connection for %s (%d tries): answering 503", node.url, path, tries)
            raise ApiError(
                503,
                f"node {node.url} accepts no connection ({tries} connect timeouts of {self.connect_timeout:g}s)",
                node=node.url,
                node_down=True,
            ) from exc
        except WireRefused as exc:
            if node.draining and not exc.resent:
                raise NodeRestarting(node.url) from exc  # it said it was stopping, and nothing was sent
            # Refused after a kept-alive connection broke with no answer: the node may have read the call
            # and died in it (killed at the end of its drain), so it is never sent again.
            self.nodes.failed(node, f"{type(exc).__name__}: {exc}", immediately=True)
            error = ApiError(503, f"node {node.url} is down ({exc})", node=node.url, node_down=True)
            if exc.resent:
                error.extra["may_have_run"] = True
            raise error from exc
        except _FAILURES as exc:
            self.nodes.failed(node, f"{type(exc).__name__}: {exc}", immediately=True)
            raise ApiError(
                503, f"node {node.url} is down ({type(exc).__name__}: {exc})", node=node.url, node_down=True
            ) from exc


RESTART_WAIT = 900.0
"""Seconds a call on a lease of a draining node waits for it to be back (an update: the drain, up to the
node's SWE_EXEC_DRAIN_SECONDS, 600 s by default, then the restart); then it is sent as it is."""


class NodeRestarting(ApiError):
    """A draining node refused the first connection of a call: it stopped to restart; the call was not
    sent. A 503 to any caller but `forward`, whose calls on a lease wait for the node to come back. (A
    connection refused after a kept-alive one broke unanswered is not this: the call may have run.)"""

    def __init__(self, url: str) -> None:
        super().__init__(503, f"node {url} is restarting after draining", node=url, node_restarting=True)


async def _restarted(node: Node, seconds: float) -> bool:
    """Wait until a node that drained is up again and no longer draining (its health checks tell)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if node.healthy and not node.draining:
            return True
        await asyncio.sleep(0.5)
    return False


async def forward(
    calls: NodeCalls,
    node: Node,
    lease: LeaseRecord,
    op: str,
    body: dict[str, Any],
    *,
    call_margin: float,
    on_lost: Callable[[LeaseRecord, str], None],
) -> tuple[int, dict[str, Any]] | Response:
    """Run op on the lease's container; a gone container calls on_lost and answers 410.

    A node that does not know the container (404 from its registry, before anything ran) is asked once
    more before the lease is lost: a container is lost on two answers, never on one. Right after the pool
    started, a call waits for its node's first check (reconciliation) rather than fail. A node down only
    because its health checks timed out (`Node.slow`: seen under load, a starved node's /healthz) still
    gets its leases' calls; one that refused or reset a connection fails them at once (503 node_down).
    """
    if not node.checked.is_set():
        await node.checked.wait()
    if node.draining:  # stopping for an update: the call waits for the restarted node (it adopts the
        await _restarted(
            node, RESTART_WAIT
        )  # lease's container), so the drain waits only for calls sent before
    if not node.healthy and not node.slow:  # a slow node's calls are tried: the call is the better probe
        raise ApiError(
            503,
            f"node {node.url} is down ({node.last_error or 'failing health checks'}); "
            f"lease {lease.lease_id} is unusable until it returns",
            node=node.url,
            node_down=True,
            lease_id=lease.lease_id,
        )
    payload = {k: v for k, v in body.items() if k != "lease_id"}
    payload["container_id"] = lease.container_id
    timeout = call_timeout(op, payload)

    waited = 0.0  # seconds spent waiting for the node's answers (the pool's own time is the rest)

    async def send() -> NodeAnswer:
        nonlocal waited
        lease.in_flight += 1
        lease.touch()
        t0 = time.monotonic()
        task = asyncio.current_task()
        if task is not None:
            node.calls.add(task)
        try:
            for attempt in (1, 2):
                try:
                    answer = await calls.route_post(node, f"/container/{op}", payload, timeout + call_margin)
                    if not _not_started(answer):
                        return answer
                    node.draining = True  # its own word: stopping; the call goes to the restarted node
                except NodeRestarting:
                    pass
                if attempt == 2 or not await _restarted(node, RESTART_WAIT):
                    raise ApiError(
                        503,
                        f"node {node.url} drained and did not come back within {RESTART_WAIT:.0f}s",
                        node=node.url,
                        node_down=True,
                    ) from None
                log.info(
                    "node %s is back after draining: the call on lease %s goes", node.url, lease.lease_id
                )
            raise AssertionError("unreachable")
        except asyncio.CancelledError:
            if task is None or task not in node.cut:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the cancel was ours, not the caller's
            if uncancel is not None:
                uncancel()  # cut by the node's health check (`NodeSet.failed`)
            raise ApiError(
                503,
                f"node {node.url} went down during the call ({node.last_error}); lease {lease.lease_id} is unusable",
                node=node.url,
                node_down=True,
                lease_id=lease.lease_id,
            ) from None
        finally:
            if task is not None:
                node.calls.discard(task)
                node.cut.discard(task)
            waited += time.monotonic() - t0
            lease.in_flight -= 1
            lease.touch()

    resp = await send()
    if _unknown_container(resp):
        # The node's registry did not know the container, so nothing ran: one answer is not enough to
        # lose a lease (it may have raced a create or a reaper pass); the node is asked again.
        log.info(
            "%s did not know container %s of lease %s: asking again",
            node.url,
            lease.container_id[:12],
            lease.lease_id,
        )
        resp = await send()
    if resp.status_code == 200:  # passed through as is: no parsing and re-encoding of (large) outputs
        node_seconds = getattr(resp, "node_seconds", None)
        headers = {NODE_WAIT_HEADER: f"{waited:.6f}"}
        if node_seconds is not None:
            headers[NODE_SECONDS_HEADER] = f"{node_seconds:.6f}"
        return Response(resp.content, 200, headers=headers, media_type="application/json")
    data = json_of(resp)
    error = str(data.get("error", ""))
    if resp.status_code in (409, 410) or _unknown_container(resp):
        on_lost(lease, error or f"exec server answered {resp.status_code}")
        raise ApiError(
            410,
            f"container of lease {lease.lease_id} is gone: {error}",
            lease_id=lease.lease_id,
            lease_lost=True,
        )
    return resp.status_code, data


def _not_started(resp: Answer) -> bool:
    """The node refused the call before starting it (`exec/drain.py`: its drain is over, it is exiting)."""
    return resp.status_code == 503 and json_of(resp).get("not_started") is True


def _unknown_container(resp: Answer) -> bool:
    """The exec server's registry does not know the container (its 404 before running anything)."""
    return resp.status_code == 404 and str(json_of(resp).get("error", "")).startswith("unknown container")
