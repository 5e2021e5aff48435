"""Pool server: hands out container leases over a fleet of exec servers.

Runs on the GPU head node (port 18090), started by the training or eval
script. It deploys with starlette, uvicorn and httpx only, nothing of `swe_rl`.

Why it is built this way:
- Async (Starlette on uvicorn, one shared `httpx.AsyncClient`): a one-hour
  evaluation is just an awaiting coroutine, it never blocks other calls.
- A lease is the unit clients hold: a container on one node, kept alive by
  heartbeats. Leases nobody heartbeats are reclaimed, so a crashed rollout
  worker leaks nothing.
- Leases are persisted in SQLite and reconciled against each node's own list
  of containers at start and whenever a node comes back: containers labelled
  with our owner id that no lease knows are destroyed (a restart leaks nothing),
  leases whose container vanished are marked lost.
- A node that fails its health checks (or refuses a connection mid-call) is
  marked down: calls on its leases fail fast with 503 instead of hanging, and
  no allocation goes there until its /healthz answers again.
- Every endpoint but /healthz needs the bearer token; bad input gets a 4xx JSON
  error, never a stack trace.
- Warm pools and placement: each allocate (or `POST /warm`) tells the nodes,
  fire-and-forget, how many containers of that exact request to keep started
  ahead (`expected` more leases soon, at least `warm_min`), spread by free
  capacity. Placement prefers, among the nodes within `affinity_slack` of the
  least loaded, those holding warm containers of the request, then those with
  the image pulled; each node's cap is the smaller of ours and its own report.
  A full fleet answers 429 with Retry-After (back-pressure, not failure).
- Scale: per-node lease counts and indexes are kept incrementally, so an
  allocate or a routed call costs the same with 10 leases or 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import random
import itertools
import secrets
import socket
import sqlite3
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

try:  # next to this file; imported as server.request_checks from the repository
    from pool_release import DestroyQueue
    from request_checks import BadRequest, check_create_options, parse_body
except ImportError:  # pragma: no cover - depends on how the server is started
    from server.pool_release import DestroyQueue
    from server.request_checks import BadRequest, check_create_options, parse_body

__version__ = "0.1.0"
log = logging.getLogger("swe_pool_server")

ROUTED_OPS = ("exec", "diff", "evaluate", "write_file", "read_file")
DEFAULT_EXEC_TIMEOUT = 180.0
DEFAULT_EVAL_TIMEOUT = 1800.0
EVAL_APPLY_ALLOWANCE = 900.0  # evaluate applies the patch (up to 3 strategies) before the tests run
PLAIN_CALL_TIMEOUT = 300.0  # diff and file calls


# --------------------------------------------------------------------------- config


def _read_token(token: str, token_file: str) -> str:
    if token:
        return token.strip()
    if token_file:
        with open(os.path.expanduser(token_file), encoding="utf-8") as fh:
            return fh.read().strip()
    return ""


@dataclass
class PoolConfig:
    """Pool server settings; each field can be set by an `SWE_*` variable or a flag."""

    exec_urls: list[str] = field(default_factory=list)
    """Exec servers to spread leases over (`SWE_EXEC_SERVER_URLS`, comma-separated, required)."""
    exec_token: str = field(default="", repr=False)
    """Bearer token the pool sends to exec servers (`SWE_EXEC_TOKEN` / `SWE_EXEC_TOKEN_FILE`)."""
    pool_token: str = field(default="", repr=False)
    """Bearer token clients must send (`SWE_POOL_TOKEN` / `SWE_POOL_TOKEN_FILE`; defaults to the exec token)."""
    host: str = "127.0.0.1"
    """Address to bind (`SWE_POOL_HOST`). Loopback unless told otherwise."""
    port: int = 18090
    """Port to bind (`SWE_POOL_PORT`)."""
    pool_id: str = ""
    """Owner label written on our containers (`SWE_POOL_ID`, default hostname:port); reconciliation
    destroys containers with this owner that no lease knows, so two pools must never share it."""
    db_path: str = ""
    """SQLite file of live leases (`SWE_POOL_DB`, default ~/.cache/swe-rl/pool-<port>.db)."""
    lease_ttl: float = 300.0
    """Seconds without heartbeat or call before a lease is reclaimed (`SWE_LEASE_TTL`)."""
    max_per_node: int = 15
    """Leases per node at most, allocations in flight included (`SWE_MAX_CONTAINERS_PER_NODE`)."""
    health_interval: float = 5.0
    """Seconds between health checks of each node (`SWE_HEALTH_INTERVAL`)."""
    node_down_after: int = 2
    """Consecutive failed health checks that mark a node down (`SWE_NODE_DOWN_AFTER`)."""
    reap_interval: float = 10.0
    """Seconds between passes of the expired-lease reaper (`SWE_POOL_REAP_INTERVAL`)."""
    touch_interval: float = 30.0
    """Upper bound on seconds between batch touches of live containers (`SWE_POOL_TOUCH_INTERVAL`);
    the pool touches at least every lease_ttl/4 so exec servers never reap a live container."""
    connect_timeout: float = 5.0
    """Seconds to connect to an exec server (`SWE_POOL_CONNECT_TIMEOUT`)."""
    call_margin: float = 30.0
    """Seconds added to a command's timeout for the HTTP call that carries it (`SWE_POOL_CALL_MARGIN`)."""
    retry_after: int = 2
    """Retry-After seconds sent with 429 when every node is at its cap (`SWE_POOL_RETRY_AFTER`)."""
    shutdown_grace: int = 10
    """Seconds in-flight requests get at shutdown before the pool releases everything (`SWE_POOL_SHUTDOWN_GRACE`)."""
    keep_leases_on_exit: bool = False
    """Keep containers and the lease table at shutdown, for a rolling restart (`SWE_POOL_KEEP_LEASES_ON_EXIT=1`)."""
    warm_min: int = 1
    """Warm containers asked for after an allocate that gives no `expected` (its grading container;
    `SWE_POOL_WARM_MIN`, 0 turns implicit warming off)."""
    warm_per_image: int = 8
    """Warm containers of one exact request the pool asks the fleet for at most (`SWE_POOL_WARM_PER_IMAGE`)."""
    warm_ttl: float = 600.0
    """Lifetime of a warm target on the nodes, renewed by each allocate of the request (`SWE_POOL_WARM_TTL`)."""
    affinity_slack: float = 0.1
    """Fraction of a node's cap by which a node with warm containers (or the image) may be more loaded than
    the least loaded one and still be preferred (`SWE_POOL_AFFINITY_SLACK`; 0: affinity only breaks ties)."""
    connection_shards: int = 8
    """Connection pools per exec server (`SWE_POOL_CONNECTION_SHARDS`): several small ones stay fast
    with hundreds of calls in flight to one node."""
    max_body_bytes: int = 128 << 20
    """Largest request body accepted; larger ones get a 413 JSON error (`SWE_POOL_MAX_BODY_BYTES`)."""
    images_interval: float = 60.0
    """Seconds between refreshes of each node's image list, used for image affinity (`SWE_POOL_IMAGES_INTERVAL`)."""

    @property
    def idle_ttl(self) -> float:
        """Idle TTL asked of exec servers: above the lease TTL, so only a dead pool lets them reap."""
        return self.lease_ttl + max(120.0, self.lease_ttl)

    @property
    def effective_touch_interval(self) -> float:
        return max(0.2, min(self.touch_interval, self.lease_ttl / 4))

    @classmethod
    def from_env(cls) -> "PoolConfig":
        e = os.environ.get
        cfg = cls()
        cfg.exec_urls = [u.strip().rstrip("/") for u in e("SWE_EXEC_SERVER_URLS", "").split(",") if u.strip()]
        cfg.exec_token = _read_token(e("SWE_EXEC_TOKEN", ""), e("SWE_EXEC_TOKEN_FILE", ""))
        cfg.pool_token = _read_token(e("SWE_POOL_TOKEN", ""), e("SWE_POOL_TOKEN_FILE", ""))
        cfg.host = e("SWE_POOL_HOST", cfg.host)
        cfg.port = int(e("SWE_POOL_PORT", str(cfg.port)))
        cfg.pool_id = e("SWE_POOL_ID", "")
        cfg.db_path = e("SWE_POOL_DB", "")
        cfg.lease_ttl = float(e("SWE_LEASE_TTL", str(cfg.lease_ttl)))
        cfg.max_per_node = int(e("SWE_MAX_CONTAINERS_PER_NODE", str(cfg.max_per_node)))
        cfg.health_interval = float(e("SWE_HEALTH_INTERVAL", str(cfg.health_interval)))
        cfg.node_down_after = int(e("SWE_NODE_DOWN_AFTER", str(cfg.node_down_after)))
        cfg.reap_interval = float(e("SWE_POOL_REAP_INTERVAL", str(cfg.reap_interval)))
        cfg.touch_interval = float(e("SWE_POOL_TOUCH_INTERVAL", str(cfg.touch_interval)))
        cfg.connect_timeout = float(e("SWE_POOL_CONNECT_TIMEOUT", str(cfg.connect_timeout)))
        cfg.call_margin = float(e("SWE_POOL_CALL_MARGIN", str(cfg.call_margin)))
        cfg.retry_after = int(e("SWE_POOL_RETRY_AFTER", str(cfg.retry_after)))
        cfg.shutdown_grace = int(e("SWE_POOL_SHUTDOWN_GRACE", str(cfg.shutdown_grace)))
        cfg.keep_leases_on_exit = e("SWE_POOL_KEEP_LEASES_ON_EXIT", "0") == "1"
        cfg.warm_min = int(e("SWE_POOL_WARM_MIN", str(cfg.warm_min)))
        cfg.warm_per_image = int(e("SWE_POOL_WARM_PER_IMAGE", str(cfg.warm_per_image)))
        cfg.warm_ttl = float(e("SWE_POOL_WARM_TTL", str(cfg.warm_ttl)))
        cfg.affinity_slack = float(e("SWE_POOL_AFFINITY_SLACK", str(cfg.affinity_slack)))
        cfg.images_interval = float(e("SWE_POOL_IMAGES_INTERVAL", str(cfg.images_interval)))
        cfg.max_body_bytes = int(e("SWE_POOL_MAX_BODY_BYTES", str(cfg.max_body_bytes)))
        cfg.connection_shards = int(e("SWE_POOL_CONNECTION_SHARDS", str(cfg.connection_shards)))
        return cfg

    def finalize(self) -> "PoolConfig":
        """Fill port-dependent defaults and refuse settings the pool cannot run with."""
        self.pool_token = self.pool_token or self.exec_token
        self.pool_id = (self.pool_id or f"{socket.gethostname()}:{self.port}")[:128]
        self.db_path = os.path.expanduser(self.db_path or f"~/.cache/swe-rl/pool-{self.port}.db")
        if not self.exec_urls:
            raise SystemExit("error: no exec servers: set SWE_EXEC_SERVER_URLS (comma-separated) or --exec-urls")
        if not self.exec_token:
            raise SystemExit("error: no exec token: set SWE_EXEC_TOKEN or SWE_EXEC_TOKEN_FILE (or --exec-token-file)")
        if self.lease_ttl <= 0 or self.max_per_node <= 0 or self.node_down_after <= 0:
            raise SystemExit("error: lease TTL, per-node cap and node-down-after must be positive")
        return self


# --------------------------------------------------------------------------- errors and leases


class ApiError(Exception):
    """An error with an HTTP status and a message the caller can act on."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers or {}, extra

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message, **self.extra}, self.status, headers=self.headers)


@dataclass(slots=True)
class Lease:
    lease_id: str
    request_id: str | None
    node: str
    container_id: str
    image: str
    instance_id: str | None
    workdir: str
    created: float
    """Wall time of the allocation."""
    last_seen: float = field(default_factory=time.monotonic)
    """Monotonic time of the last heartbeat or call (memory only)."""
    lost: str | None = None
    """Why the container is gone, once it is; calls then answer 410."""
    in_flight: int = 0
    warm: bool = False
    """The node handed over a warm container (memory only)."""

    def public(self, ttl: float) -> dict[str, Any]:
        idle = time.monotonic() - self.last_seen
        return {"lease_id": self.lease_id, "node": self.node, "container_id": self.container_id,
                "image": self.image, "instance_id": self.instance_id, "workdir": self.workdir,
                "expires_at": round(time.time() + ttl - idle, 3), "warm": self.warm}


class LeaseStore:
    """SQLite record of live leases, so a restarted pool forgets none.

    Written on allocate, close and reclaim only; heartbeats stay in memory and
    every lease loaded at start gets a fresh heartbeat window.
    """

    COLUMNS = ("lease_id", "request_id", "node", "container_id", "image", "instance_id", "workdir", "created",
               "last_seen")

    def __init__(self, path: str) -> None:
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # survives a killed process, which is what matters here
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS leases (lease_id TEXT PRIMARY KEY, request_id TEXT UNIQUE, node TEXT NOT NULL,"
            " container_id TEXT NOT NULL, image TEXT NOT NULL, instance_id TEXT, workdir TEXT, created REAL NOT NULL,"
            " last_seen REAL NOT NULL)")

    def load(self) -> list[Lease]:
        rows = self.db.execute(f"SELECT {', '.join(self.COLUMNS[:-1])} FROM leases").fetchall()
        return [Lease(*row) for row in rows]

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM leases").fetchone()[0])

    def put(self, lease: Lease) -> None:
        self.db.execute(f"INSERT OR REPLACE INTO leases VALUES ({', '.join('?' * len(self.COLUMNS))})",
                        (lease.lease_id, lease.request_id, lease.node, lease.container_id, lease.image,
                         lease.instance_id, lease.workdir, lease.created, time.time()))

    def delete(self, lease_id: str) -> None:
        self.db.execute("DELETE FROM leases WHERE lease_id = ?", (lease_id,))

    def clear(self) -> None:
        self.db.execute("DELETE FROM leases")

    def close(self) -> None:
        self.db.close()


# --------------------------------------------------------------------------- nodes


@dataclass
class Node:
    url: str
    healthy: bool = False
    """False until the first good health check (and reconciliation) at start."""
    failures: int = 0
    pending: int = 0
    """Allocations in flight to this node: counted in its load so the cap holds under bursts."""
    last_error: str = ""
    last_health: float = 0.0
    """Wall time of the last successful health check."""
    active: int = 0
    """Leases on this node whose container is not lost (kept incrementally by the pool)."""
    capacity: int = 0
    """Containers the node says it holds at most (0: unknown)."""
    memory_total: int = 0
    memory_available: int = 0
    cpus: int = 0
    max_warm: int = 0
    warm_dropped: int = 0
    """Warm specs the node dropped after failing to start them (its own count)."""
    warm: dict[str, int] = field(default_factory=dict)
    """Ready warm containers per image, as of the last health check."""
    images: frozenset[str] | None = None
    """Images the node has, refreshed every images_interval (None: unknown)."""
    images_at: float = 0.0
    warm_targets: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    """Warm target we last sent per request key: (count, monotonic expiry)."""

    def report(self, health: dict[str, Any]) -> None:
        """Take the node's own figures from its /healthz answer."""
        def num(key: str) -> int:
            value = health.get(key)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

        self.capacity, self.memory_total, self.memory_available = num("capacity"), num("memory_total"), \
            num("memory_available")
        self.cpus, self.max_warm, self.warm_dropped = num("cpus"), num("max_warm"), num("warm_dropped")
        warm = health.get("warm")
        self.warm = {str(k): int(v) for k, v in warm.items() if isinstance(v, int)} if isinstance(warm, dict) else {}


class NodeSet:
    """Health bookkeeping of the exec servers; knows nothing of leases."""

    def __init__(self, urls: list[str], down_after: int) -> None:
        self.nodes = {url: Node(url) for url in urls}
        self.down_after = down_after

    def __iter__(self) -> Any:
        return iter(self.nodes.values())

    def get(self, url: str) -> Node:
        return self.nodes[url]

    def healthy(self) -> list[Node]:
        return [n for n in self if n.healthy]

    def failed(self, node: Node, reason: str, *, immediately: bool = False) -> None:
        node.failures += 1
        node.last_error = reason
        if node.healthy and (immediately or node.failures >= self.down_after):
            node.healthy = False
            log.warning("node %s is down: %s", node.url, reason)

    def succeeded(self, node: Node) -> None:
        if not node.healthy:
            log.info("node %s is up", node.url)
        node.healthy, node.failures, node.last_health = True, 0, time.time()


# --------------------------------------------------------------------------- metrics


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    def esc(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    """Counters and latency sums in the Prometheus text format (no client library needed)."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0.0) + value

    def observe(self, op: str, seconds: float) -> None:
        self.inc("swe_pool_call_seconds_count", op=op)
        self.inc("swe_pool_call_seconds_sum", seconds, op=op)

    def render(self, gauges: list[tuple[str, dict[str, str], float]]) -> str:
        helps = {
            "swe_pool_leases_active": ("gauge", "Leases currently held."),
            "swe_pool_node_leases": ("gauge", "Leases per node."),
            "swe_pool_node_up": ("gauge", "1 if the node passes its health checks."),
            "swe_pool_allocations_total": ("counter", "Allocation requests by outcome."),
            "swe_pool_calls_total": ("counter", "Routed calls by op and outcome."),
            "swe_pool_leases_reclaimed_total": ("counter", "Leases reclaimed by the pool, by reason."),
            "swe_pool_call_seconds": ("summary", "Latency of pool calls by op."),
            "swe_pool_allocations_warm_total": ("counter", "Allocations served by a warm container."),
            "swe_pool_warm_requests_total": ("counter", "Warm targets sent to nodes, by outcome."),
            "swe_pool_warm_cancelled_total": ("counter", "Warm targets withdrawn after an allocate failed as a client error."),
            "swe_pool_destroys_total": ("counter", "Background destroys of released containers, by outcome."),
            "swe_pool_destroys_pending": ("gauge", "Released containers not destroyed yet."),
            "swe_pool_node_warm_dropped": ("gauge", "Warm specs a node dropped after repeated start failures."),
        }
        rows: dict[str, list[str]] = {}
        for name, labels, value in gauges:
            rows.setdefault(name, []).append(f"{name}{_labels(labels)} {value:g}")
        for (name, labels), value in sorted(self.counters.items()):
            family = name.removesuffix("_count").removesuffix("_sum")
            rows.setdefault(family, []).append(f"{name}{_labels(dict(labels))} {value:g}")
        out = []
        for family, lines in rows.items():
            kind, text = helps.get(family, ("untyped", family))
            out += [f"# HELP {family} {text}", f"# TYPE {family} {kind}", *lines]
        return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the pool


def _opt_str(body: dict[str, Any], key: str, limit: int = 256) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ApiError(400, f"{key} must be a non-empty string of at most {limit} characters")
    return value


WARM_OPTIONS = ("network", "memory", "cpus", "pids_limit", "workdir", "env")
"""Create options that make two requests interchangeable: a warm container serves only its exact request."""


def warm_key(image: str, body: dict[str, Any]) -> tuple[str, str]:
    return image, json.dumps({k: body[k] for k in WARM_OPTIONS if body.get(k) is not None}, sort_keys=True)


def _opt_count(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100_000:
        raise ApiError(400, f"{key} must be a whole number from 0 to 100000")
    return value


@dataclass(slots=True)
class Demand:
    """Leases of one exact request expected soon, by the hints of recent allocates."""

    remaining: int
    expires: float


def _check_create(body: dict[str, Any]) -> None:
    try:
        check_create_options(body)
    except BadRequest as exc:
        raise ApiError(exc.status, exc.message) from None


def _number(value: Any, default: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value > 0
    return float(value) if ok else default


class Pool:
    """Leases over the nodes: allocate, route, heartbeat, close, reap, reconcile."""

    def __init__(self, config: PoolConfig) -> None:
        self.cfg = config
        self.nodes = NodeSet(config.exec_urls, config.node_down_after)
        self.store = LeaseStore(config.db_path)
        self.metrics = Metrics()
        self.leases: dict[str, Lease] = {}
        self.by_request: dict[str, str] = {}
        self.allocations: dict[str, asyncio.Task[dict[str, Any]]] = {}
        """Allocations in flight by request id: a retry awaits the same one."""
        self._alloc_tasks: set[asyncio.Task[dict[str, Any]]] = set()
        self.allocating: set[str] = set()
        """Lease ids being created: reconciliation must not take their containers for orphans."""
        self.by_node: dict[str, dict[str, Lease]] = {url: {} for url in config.exec_urls}
        self.demand: dict[tuple[str, str], Demand] = {}
        self._background: set[asyncio.Task[Any]] = set()
        """Fire-and-forget calls (warm requests) in flight."""
        self.http: httpx.AsyncClient | None = None
        self.node_http: dict[str, list[httpx.AsyncClient]] = {}
        self._shard_counter = itertools.count()
        self._ssl: ssl.SSLContext | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.destroys = DestroyQueue(self._post, self.metrics)
        """Containers of released leases being destroyed in the background (off close's path)."""

    # ---- lifecycle

    async def start(self) -> None:
        self._ssl = ssl.create_default_context()  # loaded once, shared by every client
        self.http = self._new_client()
        # Small connection pools, several per node: httpcore's pool spends time in proportion to its
        # connections on every request, which a single pool holding thousands turns quadratic.
        self.node_http = {url: [self._new_client() for _ in range(max(1, self.cfg.connection_shards))]
                          for url in self.cfg.exec_urls}
        for lease in self.store.load():
            lease.last_seen = time.monotonic()
            self._add(lease)
        log.info("pool %s: %d leases loaded from %s", self.cfg.pool_id, len(self.leases), self.cfg.db_path)
        await self.check_health()  # reconciles each reachable node before the first request
        for loop, interval in ((self.check_health, self.cfg.health_interval),
                               (self.reap_expired, self.cfg.reap_interval),
                               (self.touch_live, self.cfg.effective_touch_interval)):
            self._tasks.append(asyncio.create_task(self._every(interval, loop)))

    async def stop(self) -> None:
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        if self._alloc_tasks:  # let them finish, so their containers are released below
            await asyncio.wait(list(self._alloc_tasks), timeout=60)
        if not self.cfg.keep_leases_on_exit:
            await self._cancel_warm_targets()
            leases = list(self.leases.values())
            for lease in leases:
                self._release(lease, "shutdown")
            destroyed = await self.destroys.drain(max(30.0, self.cfg.shutdown_grace))
            self.store.clear()
            log.info("shutdown: released %d leases (%d containers destroyed)", len(leases), destroyed)
        else:
            await self.destroys.drain(max(30.0, self.cfg.shutdown_grace))
        self.store.close()
        for client in [self.http, *(c for shards in self.node_http.values() for c in shards)]:
            if client is not None:
                await client.aclose()

    async def _cancel_warm_targets(self) -> None:
        """Tell the nodes to stop refilling what we asked for (what is warm still expires with its TTL)."""
        calls = []
        for node in self.nodes.healthy():
            for (image, options), _ in list(node.warm_targets.items()):
                body = {"image": image, **json.loads(options), "count": 0}
                calls.append(self._post(node, "/warm", body, 5.0))
            node.warm_targets.clear()
        await asyncio.gather(*calls, return_exceptions=True)

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            verify=self._ssl, headers={"Authorization": f"Bearer {self.cfg.exec_token}"},
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),  # reuse: no reconnect storms
            timeout=httpx.Timeout(PLAIN_CALL_TIMEOUT, connect=self.cfg.connect_timeout))

    async def _every(self, interval: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()
            except Exception:  # a background loop must outlive any one bad pass
                log.exception("background pass %s failed", fn.__name__)

    # ---- bookkeeping

    def _add(self, lease: Lease) -> None:
        self.leases[lease.lease_id] = lease
        if lease.request_id:
            self.by_request[lease.request_id] = lease.lease_id
        self.by_node.setdefault(lease.node, {})[lease.lease_id] = lease
        node = self.nodes.nodes.get(lease.node)
        if node is not None and not lease.lost:
            node.active += 1

    def _drop(self, lease: Lease) -> None:
        if self.leases.get(lease.lease_id) is lease:
            del self.leases[lease.lease_id]
            self.by_node.get(lease.node, {}).pop(lease.lease_id, None)
            node = self.nodes.nodes.get(lease.node)
            if node is not None and not lease.lost:
                node.active -= 1
        if lease.request_id and self.by_request.get(lease.request_id) == lease.lease_id:
            del self.by_request[lease.request_id]
        self.store.delete(lease.lease_id)

    def _mark_lost(self, lease: Lease, reason: str) -> None:
        """The container is gone: keep a tombstone so calls get a clear 410 until close or TTL."""
        if lease.lost is None:
            log.warning("lease %s lost: %s", lease.lease_id, reason)
            lease.lost = reason
            node = self.nodes.nodes.get(lease.node)
            if node is not None and self.leases.get(lease.lease_id) is lease:
                node.active -= 1
            self.store.delete(lease.lease_id)
            self.metrics.inc("swe_pool_leases_reclaimed_total", reason="container_gone")

    def load(self, node: Node) -> int:
        return node.pending + node.active

    def cap(self, node: Node) -> int:
        """Leases this node takes at most: our cap, or the node's own when smaller."""
        return min(self.cfg.max_per_node, node.capacity) if node.capacity > 0 else self.cfg.max_per_node

    def lease_of(self, body: dict[str, Any], *, allow_lost: bool = False) -> Lease:
        lease_id = body.get("lease_id")
        if not isinstance(lease_id, str) or not lease_id:
            raise ApiError(400, "missing or empty string field 'lease_id'")
        lease = self.leases.get(lease_id)
        if lease is None:
            raise ApiError(404, f"unknown or expired lease {lease_id!r}", lease_id=lease_id, lease_lost=True)
        if lease.lost and not allow_lost:
            raise ApiError(410, f"container of lease {lease_id} is gone: {lease.lost}", lease_id=lease_id,
                           lease_lost=True)
        return lease

    # ---- exec server calls

    async def _post(self, node: Node, path: str, payload: dict[str, Any], timeout: float) -> httpx.Response:
        """POST to a node; a refused connection marks it down at once (503), a timeout is a 504.

        A connect timeout means an overloaded node more often than a dead one: the request was never
        sent, so it is tried once more, and then left to the health checks to judge the node.
        """
        shards = self.node_http[node.url]
        http = shards[next(self._shard_counter) % len(shards)]
        http_timeout = httpx.Timeout(timeout, connect=self.cfg.connect_timeout)
        try:
            try:
                return await http.post(node.url + path, json=payload, timeout=http_timeout)
            except httpx.ConnectTimeout:
                return await http.post(node.url + path, json=payload, timeout=http_timeout)
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:
            raise ApiError(504, f"node {node.url} did not answer {path} within {timeout:.0f}s",
                           node=node.url) from exc
        except httpx.ConnectTimeout as exc:
            raise ApiError(503, f"node {node.url} accepts no connection (connect timeout twice)", node=node.url,
                           node_down=True) from exc
        except httpx.HTTPError as exc:
            self.nodes.failed(node, f"{type(exc).__name__}: {exc}", immediately=True)
            raise ApiError(503, f"node {node.url} is down ({type(exc).__name__}: {exc})", node=node.url,
                           node_down=True) from exc

    @staticmethod
    def _json(resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ApiError(502, f"exec server answered {resp.status_code} without a JSON object: {resp.text[:200]!r}")
        return data

    def _release(self, lease: Lease, reason: str) -> asyncio.Task[bool]:
        """Forget a lease now; its container is destroyed right after, in the background, until it is gone."""
        self._drop(lease)
        log.info("lease %s released (%s); destroying container %s on %s", lease.lease_id, reason,
                 lease.container_id[:12], lease.node)
        return self.destroys.submit(self.nodes.get(lease.node), lease.container_id)

    # ---- allocate

    async def allocate(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            result = await self._allocate_once(body)
        except ApiError as exc:
            outcome = {404: "image_not_found", 429: "full", 503: "no_node"}.get(exc.status, "error")
            self.metrics.inc("swe_pool_allocations_total", outcome="bad_request" if exc.status in (400, 403, 422)
                             else outcome)
            raise
        self.metrics.inc("swe_pool_allocations_total", outcome="ok")
        return result

    async def _allocate_once(self, body: dict[str, Any]) -> dict[str, Any]:
        """Run one allocation per request id: a retry gets the lease, or awaits the allocation in flight."""
        image = _opt_str(body, "image")
        if image is None:
            raise ApiError(400, "missing or empty string field 'image'")
        request_id = _opt_str(body, "request_id", 200)
        _opt_str(body, "instance_id")
        _opt_count(body, "expected")
        _check_create(body)
        if request_id and request_id in self.by_request:
            return self.leases[self.by_request[request_id]].public(self.cfg.lease_ttl)
        if request_id and request_id in self.allocations:
            return await asyncio.shield(self.allocations[request_id])
        task = asyncio.create_task(self._allocate(image, request_id, body))
        self._alloc_tasks.add(task)
        task.add_done_callback(self._allocation_done)
        if request_id:
            self.allocations[request_id] = task
        return await asyncio.shield(task)  # a dropped connection must not leave a half-made lease

    def _allocation_done(self, task: asyncio.Task[dict[str, Any]]) -> None:
        self._alloc_tasks.discard(task)
        for rid, t in list(self.allocations.items()):
            if t is task:
                del self.allocations[rid]
        if not task.cancelled():
            task.exception()  # retrieved here: its caller may have gone away

    async def _allocate(self, image: str, request_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
        lease_id = secrets.token_urlsafe(16)
        payload: dict[str, Any] = {"image": image, "lease_id": lease_id, "owner": self.cfg.pool_id,
                                   "idle_ttl": self.cfg.idle_ttl}
        for key in ("network", "memory", "cpus", "pids_limit", "workdir", "env"):
            if body.get(key) is not None:
                payload[key] = body[key]
        key = warm_key(image, payload)
        self._plan_warm(key, payload, _opt_count(body, "expected"))  # fire-and-forget, before our own create
        tried: set[str] = set()
        missing: list[str] = []
        errors: list[str] = []
        full: set[str] = set()
        missing_network = ""
        while True:
            candidates = [n for n in self.nodes.healthy() if n.url not in tried]
            full.update(n.url for n in candidates if self.load(n) >= self.cap(n))
            candidates = [n for n in candidates if self.load(n) < self.cap(n)]
            if not candidates:
                break
            node = min(candidates, key=lambda n: self._rank(n, key))
            tried.add(node.url)
            node.pending += 1
            self.allocating.add(lease_id)
            try:
                resp = await self._post(node, "/container/create", payload, 600.0)
                data = self._json(resp)
                if resp.status_code == 200:
                    lease = Lease(lease_id, request_id, node.url, data["container_id"], image,
                                  body.get("instance_id"), data.get("workdir") or "/testbed", time.time(),
                                  warm=data.get("warm") is True)
                    self._add(lease)
                    self.store.put(lease)
                    if lease.warm:
                        self.metrics.inc("swe_pool_allocations_warm_total")
                    log.info("lease %s: %s on %s (warm=%s)", lease_id, image, node.url, lease.warm)
                    return lease.public(self.cfg.lease_ttl)
            except ApiError as exc:
                errors.append(f"{node.url}: {exc.message}")
                continue
            finally:
                node.pending -= 1
                self.allocating.discard(lease_id)
            message = str(data.get("error", resp.text[:200]))
            if resp.status_code == 404:
                missing.append(node.url)
                if data.get("network_missing"):
                    missing_network = message
            elif resp.status_code == 429:
                full.add(node.url)
            elif 400 <= resp.status_code < 500:  # the request's fault: same on every node
                self._cancel_warm(key, payload)  # nothing may keep starting for a spec that cannot start
                extra = {k: v for k, v in data.items() if k not in ("error", "node", "node_down")}
                raise ApiError(resp.status_code, message, node=node.url, **extra)
            else:
                errors.append(f"{node.url}: {resp.status_code} {message}")
        if full:
            raise ApiError(429, f"all nodes that might hold {image} are full ({len(full)} at their cap)",
                           headers={"Retry-After": str(self.cfg.retry_after)}, retry_after=self.cfg.retry_after)
        if missing and not errors:
            self._cancel_warm(key, payload)
            if missing_network:  # a named network the nodes allow but do not have: say so, not "image"
                raise ApiError(404, f"{missing_network} (and on every other healthy node)", image=image,
                               nodes=missing, network_missing=True)
            raise ApiError(404, f"image not found on any healthy node: {image}", image=image, nodes=missing)
        if not tried:
            raise ApiError(503, f"no healthy exec server (of {len(self.nodes.nodes)})", node_down=True)
        raise ApiError(503, "allocation failed on every healthy node: " + "; ".join(errors), node_down=True)

    # ---- placement and warm pools

    def _rank(self, node: Node, key: tuple[str, str]) -> tuple[Any, ...]:
        """Sort key of a candidate node: near-least-loaded first, then warm, then image pulled, then headroom."""
        cap = self.cap(node)
        used = self.load(node) / cap
        bucket = int(used / self.cfg.affinity_slack + 1e-9) if self.cfg.affinity_slack > 0 else used
        image = key[0]
        has_image = node.images is None or image in node.images
        return (bucket, 0 if self._warm_at(node, key) else 1, 0 if has_image else 1, used,
                -node.memory_available, random.random())

    def _warm_at(self, node: Node, key: tuple[str, str]) -> bool:
        target = node.warm_targets.get(key)
        if target is not None and target[0] > 0 and target[1] > time.monotonic():
            return True
        return node.warm.get(key[0], 0) > 0

    def _plan_warm(self, key: tuple[str, str], payload: dict[str, Any], expected: int | None, *,
                   override: bool = False) -> dict[str, int]:
        """Update the demand of one exact request and spread its warm target over the nodes.

        Never waits: the nodes are told in the background. An allocate consumes one expected lease;
        `expected` (default warm_min) raises the demand; `override` (POST /warm) sets it.
        """
        now = time.monotonic()
        d = self.demand.get(key)
        previous = d.remaining if d is not None and d.expires > now else 0
        wanted = self.cfg.warm_min if expected is None else expected
        remaining = wanted if override else max(previous - 1, wanted)
        if remaining <= 0:
            self.demand.pop(key, None)
        else:
            self.demand[key] = Demand(remaining, now + self.cfg.warm_ttl)
        if remaining <= 0 and previous <= 0 and not any(key in n.warm_targets for n in self.nodes):
            return {}
        return self._spread(key, payload, min(remaining, self.cfg.warm_per_image), now)

    def _spread(self, key: tuple[str, str], payload: dict[str, Any], desired: int, now: float) -> dict[str, int]:
        """Move the per-node targets of key towards a total of `desired`, by free capacity; send the changes."""
        nodes = self.nodes.healthy()
        old: dict[str, int] = {}
        for n in self.nodes:
            t = n.warm_targets.get(key)
            if t is not None and t[1] <= now:
                del n.warm_targets[key]
                t = None
            old[n.url] = t[0] if t is not None else 0
        new = {n.url: old[n.url] if n.healthy else 0 for n in self.nodes}

        def room(n: Node) -> int:  # warm slots this node can still take
            limit = n.max_warm if n.max_warm > 0 else self.cfg.warm_per_image
            return min(self.cap(n) - self.load(n), limit) - new[n.url]

        total = sum(new.values())
        while total < desired:
            open_nodes = [n for n in nodes if room(n) > 0]
            if not open_nodes:
                break
            best = max(open_nodes, key=lambda n: (room(n), n.memory_available, random.random()))
            new[best.url] += 1
            total += 1
        while total > desired:
            worst = max((n for n in self.nodes if new[n.url] > 0), key=lambda n: (new[n.url], -room(n)))
            new[worst.url] -= 1
            total -= 1
        body = {**payload, "ttl": self.cfg.warm_ttl}
        body.pop("lease_id", None), body.pop("owner", None), body.pop("idle_ttl", None)
        for n in self.nodes:
            count = new[n.url]
            previous = n.warm_targets.get(key)
            renew = previous is not None and previous[1] - now < self.cfg.warm_ttl / 2
            if count == old[n.url] and not renew:
                continue
            if count == 0:
                n.warm_targets.pop(key, None)
            else:
                n.warm_targets[key] = (count, now + self.cfg.warm_ttl)
            if n.healthy:
                self._spawn(self._send_warm(n, key, {**body, "count": count}))
        return {url: c for url, c in new.items() if c}

    async def _send_warm(self, node: Node, key: tuple[str, str], body: dict[str, Any]) -> None:
        try:
            resp = await self._post(node, "/warm", body, 30.0)
            ok = resp.status_code == 200
            if not ok:
                log.info("warm request to %s answered %d: %s", node.url, resp.status_code, resp.text[:200])
        except ApiError as exc:
            ok = False
            log.info("warm request to %s failed: %s", node.url, exc.message)
        self.metrics.inc("swe_pool_warm_requests_total", outcome="ok" if ok else "error")
        if not ok:  # forget it: the next allocate of the request asks again
            node.warm_targets.pop(key, None)

    def _cancel_warm(self, key: tuple[str, str], payload: dict[str, Any]) -> None:
        """Withdraw the warm targets of a request that failed as a client error (sent to the nodes at once)."""
        self.demand.pop(key, None)
        if any(key in n.warm_targets for n in self.nodes):
            self._spread(key, payload, 0, time.monotonic())
            self.metrics.inc("swe_pool_warm_cancelled_total")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def warm(self, body: dict[str, Any]) -> dict[str, Any]:
        """Ask the fleet to keep `count` containers of this exact request started ahead (0 cancels)."""
        image = _opt_str(body, "image")
        if image is None:
            raise ApiError(400, "missing or empty string field 'image'")
        count = _opt_count(body, "count")
        if count is None:
            raise ApiError(400, "missing field 'count'")
        _check_create(body)
        payload: dict[str, Any] = {"image": image}
        for key in WARM_OPTIONS:
            if body.get(key) is not None:
                payload[key] = body[key]
        nodes = self._plan_warm(warm_key(image, payload), payload, count, override=True)
        return {"ok": True, "image": image, "count": min(count, self.cfg.warm_per_image), "nodes": nodes}

    # ---- routed calls

    async def route(self, op: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | Response:
        lease = self.lease_of(body)
        node = self.nodes.get(lease.node)
        if not node.healthy:
            raise ApiError(503, f"node {node.url} is down ({node.last_error or 'failing health checks'}); "
                                f"lease {lease.lease_id} is unusable until it returns", node=node.url,
                           node_down=True, lease_id=lease.lease_id)
        payload = {k: v for k, v in body.items() if k != "lease_id"}
        payload["container_id"] = lease.container_id
        if op in ("exec", "evaluate"):  # explicit, so the node's default cannot outlast our HTTP timeout
            default = DEFAULT_EXEC_TIMEOUT if op == "exec" else DEFAULT_EVAL_TIMEOUT
            if payload.get("timeout") is None:
                payload["timeout"] = default
            timeout = _number(payload["timeout"], default) + (EVAL_APPLY_ALLOWANCE if op == "evaluate" else 0.0)
        else:
            timeout = PLAIN_CALL_TIMEOUT
        lease.in_flight += 1
        lease.last_seen = time.monotonic()
        try:
            resp = await self._post(node, f"/container/{op}", payload, timeout + self.cfg.call_margin)
        finally:
            lease.in_flight -= 1
            lease.last_seen = time.monotonic()
        if resp.status_code == 200:  # passed through as is: no parsing and re-encoding of (large) outputs
            return Response(resp.content, 200, media_type="application/json")
        data = self._json(resp)
        error = str(data.get("error", ""))
        if resp.status_code in (409, 410) or (resp.status_code == 404 and error.startswith("unknown container")):
            self._mark_lost(lease, error or f"exec server answered {resp.status_code}")
            raise ApiError(410, f"container of lease {lease.lease_id} is gone: {error}", lease_id=lease.lease_id,
                           lease_lost=True)
        return resp.status_code, data

    # ---- heartbeat / close

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        lease = self.lease_of(body)
        lease.last_seen = time.monotonic()
        return {"ok": True, "expires_at": lease.public(self.cfg.lease_ttl)["expires_at"],
                "node_healthy": self.nodes.get(lease.node).healthy}

    async def close(self, body: dict[str, Any]) -> dict[str, Any]:
        request_id = _opt_str(body, "request_id", 200)
        if request_id and not body.get("lease_id"):  # a client cancelled mid-allocate releases by request id
            if request_id in self.allocations:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.allocations[request_id])
            if request_id not in self.by_request:
                return {"ok": True, "already_closed": True}
            body = {"lease_id": self.by_request[request_id]}
        try:
            lease = self.lease_of(body, allow_lost=True)
        except ApiError as exc:
            if exc.status == 404:
                return {"ok": True, "already_closed": True}
            raise
        node = self.nodes.get(lease.node)
        self._release(lease, "close")
        if node.healthy:
            return {"ok": True, "released": True}
        return {"ok": True, "released": True, "node_down": True,
                "message": f"node {node.url} unreachable: lease released, its container is destroyed when the node "
                           "returns (or by the node's reaper)"}

    # ---- background passes

    async def check_health(self) -> None:
        await asyncio.gather(*(self._check_node(node) for node in self.nodes))

    async def _check_node(self, node: Node) -> None:
        assert self.http is not None
        try:
            resp = await self.http.get(node.url + "/healthz", timeout=min(5.0, max(1.0, self.cfg.health_interval)))
            health = self._json(resp)
            ok = resp.status_code == 200 and health.get("ok") is True
            reason = "" if ok else f"/healthz answered {resp.status_code}"
        except (httpx.HTTPError, ApiError) as exc:
            ok, reason = False, f"/healthz failed: {type(exc).__name__}: {exc}"
        if not ok:
            self.nodes.failed(node, reason)
            return
        node.report(health)
        if time.monotonic() - node.images_at > self.cfg.images_interval or not node.healthy:
            await self._refresh_images(node)
        if not node.healthy:
            try:  # a node that (re)joins is reconciled before it gets any work
                await self.reconcile(node)
            except (ApiError, httpx.HTTPError, KeyError, TypeError) as exc:
                self.nodes.failed(node, f"reconciliation failed: {exc}")
                return
        self.nodes.succeeded(node)

    async def _refresh_images(self, node: Node) -> None:
        assert self.http is not None
        try:
            resp = await self.http.get(node.url + "/images", timeout=30.0)
            images = self._json(resp).get("images") if resp.status_code == 200 else None
        except (httpx.HTTPError, ApiError) as exc:
            log.info("image list of %s unavailable: %s", node.url, exc)
            images = None
        node.images = frozenset(str(i) for i in images) if isinstance(images, list) else None
        node.images_at = time.monotonic()

    async def reconcile(self, node: Node) -> None:
        """Destroy our containers no lease knows; mark leases whose container vanished as lost."""
        assert self.http is not None
        resp = await self.http.get(node.url + "/status", timeout=30.0)
        if resp.status_code != 200:
            raise ApiError(502, f"/status answered {resp.status_code}")
        containers = self._json(resp)["containers"]
        present = {c["id"] for c in containers}
        ours = list(self.by_node.get(node.url, {}).values())
        known = {lease.container_id for lease in ours}
        for c in containers:
            if c.get("owner") == self.cfg.pool_id and c["id"] not in known and c.get("lease_id") not in self.allocating:
                log.info("reconcile: destroying orphan container %s (lease %r) on %s", c["id"][:12],
                         c.get("lease_id"), node.url)
                await self._post(node, "/container/destroy", {"container_id": c["id"]}, 60.0)
                self.metrics.inc("swe_pool_leases_reclaimed_total", reason="orphan")
        for lease in ours:
            if lease.container_id not in present:
                self._mark_lost(lease, f"container {lease.container_id[:12]} no longer exists on {node.url}")

    async def reap_expired(self) -> None:
        now = time.monotonic()
        expired = [lease for lease in self.leases.values()
                   if lease.in_flight == 0 and now - lease.last_seen > self.cfg.lease_ttl]
        for lease in expired:
            if not lease.lost:
                self.metrics.inc("swe_pool_leases_reclaimed_total", reason="ttl")
        for lease in expired:
            self._release(lease, f"no heartbeat for {self.cfg.lease_ttl:g}s")

    async def touch_live(self) -> None:
        """Tell each node which containers are alive (its idle reaper spares them) and learn which died."""
        for node in self.nodes.healthy():
            leases = {lease.container_id: lease for lease in self.by_node.get(node.url, {}).values()
                      if not lease.lost}
            if not leases:
                continue
            try:
                resp = await self._post(node, "/containers/touch", {"container_ids": list(leases)}, 30.0)
                missing = self._json(resp).get("missing", []) if resp.status_code == 200 else []
            except ApiError as exc:
                log.warning("touch on %s failed: %s", node.url, exc.message)
                continue
            for cid in missing:
                lease = leases[cid]
                if self.leases.get(lease.lease_id) is lease:
                    self._mark_lost(lease, f"container {cid[:12]} no longer exists on {node.url}")

    # ---- views

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        nodes = [{"url": n.url, "healthy": n.healthy, "load": self.load(n), "pending": n.pending,
                  "cap": self.cap(n), "failures": n.failures, "last_error": n.last_error,
                  "last_health": n.last_health, "capacity": n.capacity, "memory_total": n.memory_total,
                  "memory_available": n.memory_available, "cpus": n.cpus, "warm": n.warm,
                  "warm_targets": sum(t[0] for t in n.warm_targets.values() if t[1] > now),
                  "warm_dropped": n.warm_dropped,
                  "images": None if n.images is None else len(n.images)} for n in self.nodes]
        leases = [{"lease_id": lease.lease_id, "node": lease.node, "image": lease.image,
                   "instance_id": lease.instance_id, "age": round(time.time() - lease.created, 3),
                   "idle": round(now - lease.last_seen, 3), "in_flight": lease.in_flight, "lost": lease.lost}
                  for lease in self.leases.values()]
        return {"pool_id": self.cfg.pool_id, "version": __version__, "lease_ttl": self.cfg.lease_ttl,
                "nodes": nodes, "leases": leases,
                "totals": {"leases": len(leases), "nodes_healthy": len(self.nodes.healthy()),
                           "nodes_total": len(nodes), "capacity": sum(n["cap"] for n in nodes),
                           "free": sum(max(0, n["cap"] - n["load"]) for n in nodes if n["healthy"])}}

    def metrics_text(self) -> str:
        gauges: list[tuple[str, dict[str, str], float]] = [
            ("swe_pool_leases_active", {}, sum(1 for lease in self.leases.values() if not lease.lost)),
            ("swe_pool_destroys_pending", {}, len(self.destroys))]
        for n in self.nodes:
            gauges.append(("swe_pool_node_leases", {"node": n.url}, self.load(n)))
            gauges.append(("swe_pool_node_up", {"node": n.url}, 1 if n.healthy else 0))
            gauges.append(("swe_pool_node_warm_dropped", {"node": n.url}, n.warm_dropped))
        return self.metrics.render(gauges)


# --------------------------------------------------------------------------- HTTP app


def create_app(pool: Pool) -> Starlette:
    token = pool.cfg.pool_token.encode()

    limit = pool.cfg.max_body_bytes

    async def body_of(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length", "")
        too_large = ApiError(413, f"request body larger than {limit} bytes", limit=limit)
        if declared.isdigit() and int(declared) > limit:
            log.warning("413 on %s: body of %s bytes, limit %d", request.url.path, declared, limit)
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                log.warning("413 on %s: body over %d bytes", request.url.path, limit)
                raise too_large
            chunks.append(chunk)
        try:
            return parse_body(b"".join(chunks))
        except BadRequest as exc:
            raise ApiError(exc.status, exc.message) from None

    def endpoint(op: str, handler: Any, *, auth: bool = True, json_body: bool = True) -> Any:
        """Wrap a handler with auth, JSON parsing, error mapping and metrics."""

        async def view(request: Request) -> Response:
            t0 = time.monotonic()
            outcome = "ok"
            try:
                if auth:
                    header = request.headers.get("authorization", "")
                    supplied = header[7:].encode() if header.startswith("Bearer ") else b""
                    if not hmac.compare_digest(supplied, token):
                        raise ApiError(401, "unauthorized: missing or wrong bearer token")
                result = await handler(await body_of(request)) if json_body else await handler()
                if isinstance(result, Response):
                    return result
                status, data = result if isinstance(result, tuple) else (200, result)
                outcome = "ok" if status < 400 else "client_error" if status < 500 else "error"
                return JSONResponse(data, status)
            except ApiError as exc:
                outcome = ("unauthorized" if exc.status == 401 else "lease_lost" if exc.extra.get("lease_lost") else "node_down" if exc.extra.get("node_down")
                           else "timeout" if exc.status == 504 else "client_error" if exc.status < 500 else "error")
                return exc.response()
            except Exception as exc:  # never a stack trace to the caller
                log.exception("unhandled error on %s", request.url.path)
                outcome = "error"
                return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)
            finally:
                if json_body:
                    pool.metrics.inc("swe_pool_calls_total", op=op, outcome=outcome)
                    pool.metrics.observe(op, time.monotonic() - t0)

        return view

    async def healthz() -> Response:
        healthy = len(pool.nodes.healthy())
        return JSONResponse({"ok": healthy > 0, "nodes_healthy": healthy, "nodes_total": len(pool.nodes.nodes),
                             "leases": len(pool.leases), "version": __version__})

    async def status() -> dict[str, Any]:
        return pool.status()

    async def metrics() -> Response:
        return PlainTextResponse(pool.metrics_text(), media_type="text/plain; version=0.0.4")

    async def heartbeat(body: dict[str, Any]) -> dict[str, Any]:
        return pool.heartbeat(body)

    def routed(op: str) -> Any:
        return lambda body: pool.route(op, body)

    routes = [
        Route("/healthz", endpoint("healthz", healthz, auth=False, json_body=False), methods=["GET"]),
        Route("/status", endpoint("status", status, json_body=False), methods=["GET"]),
        Route("/metrics", endpoint("metrics", metrics, json_body=False), methods=["GET"]),
        Route("/allocate", endpoint("allocate", pool.allocate), methods=["POST"]),
        Route("/heartbeat", endpoint("heartbeat", heartbeat), methods=["POST"]),
        Route("/close", endpoint("close", pool.close), methods=["POST"]),
        Route("/warm", endpoint("warm", pool.warm), methods=["POST"]),
        *(Route(f"/{op}", endpoint(op, routed(op)), methods=["POST"]) for op in ROUTED_OPS),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": f"{exc.status_code}: {exc.detail}"}, exc.status_code, headers=exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.start()
        try:
            yield
        finally:
            await pool.stop()

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)


# --------------------------------------------------------------------------- main


def _raise_fd_limit() -> None:
    """Thousands of leases mean thousands of sockets: lift the soft descriptor limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 16, hard))
    except (ImportError, ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit: %s", exc)


def main(argv: list[str] | None = None) -> None:
    cfg = PoolConfig.from_env()
    p = argparse.ArgumentParser(description="swe-rl pool server: leases containers over exec servers")
    p.add_argument("--exec-urls", help="comma-separated exec server URLs (SWE_EXEC_SERVER_URLS)")
    p.add_argument("--exec-token-file", help="file with the exec servers' token (SWE_EXEC_TOKEN_FILE)")
    p.add_argument("--token-file", help="file with the token clients must send (SWE_POOL_TOKEN_FILE)")
    p.add_argument("--host", default=cfg.host)
    p.add_argument("--port", type=int, default=cfg.port)
    p.add_argument("--pool-id", default=cfg.pool_id or None)
    p.add_argument("--db", default=cfg.db_path or None, help="SQLite file of leases (SWE_POOL_DB)")
    p.add_argument("--lease-ttl", type=float, default=cfg.lease_ttl)
    p.add_argument("--max-per-node", type=int, default=cfg.max_per_node)
    p.add_argument("--health-interval", type=float, default=cfg.health_interval)
    p.add_argument("--node-down-after", type=int, default=cfg.node_down_after)
    p.add_argument("--reap-interval", type=float, default=cfg.reap_interval)
    p.add_argument("--keep-leases-on-exit", action="store_true", default=cfg.keep_leases_on_exit,
                   help="keep containers and leases at shutdown (rolling restart)")
    p.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "INFO"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per exec call is noise
    if a.exec_urls:
        cfg.exec_urls = [u.strip().rstrip("/") for u in a.exec_urls.split(",") if u.strip()]
    if a.exec_token_file:
        cfg.exec_token = _read_token("", a.exec_token_file)
    if a.token_file:
        cfg.pool_token = _read_token("", a.token_file)
    cfg.host, cfg.port, cfg.pool_id, cfg.db_path = a.host, a.port, a.pool_id or "", a.db or ""
    cfg.lease_ttl, cfg.max_per_node, cfg.reap_interval = a.lease_ttl, a.max_per_node, a.reap_interval
    cfg.health_interval, cfg.node_down_after = a.health_interval, a.node_down_after
    cfg.keep_leases_on_exit = a.keep_leases_on_exit
    cfg.finalize()
    _raise_fd_limit()
    log.info("pool %s on %s:%d over %d exec servers (ttl %.0fs, cap %d/node)", cfg.pool_id, cfg.host, cfg.port,
             len(cfg.exec_urls), cfg.lease_ttl, cfg.max_per_node)
    uvicorn.run(create_app(Pool(cfg)), host=cfg.host, port=cfg.port, log_level=a.log_level.lower(),
                access_log=False, timeout_graceful_shutdown=cfg.shutdown_grace, timeout_keep_alive=30)


if __name__ == "__main__":
    main()
