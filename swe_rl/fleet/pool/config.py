"""Pool server settings: one dataclass, filled from `SWE_POOL_*` variables (`ENV`), then from flags (see app.main)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from swe_rl.fleet.settings import EnvVar, field_types, prefixed, read_env
from swe_rl.fleet.tls import client_context, require_https, server_files


@dataclass
class PoolConfig:
    """Pool server settings; each field can be set by an `SWE_POOL_*` variable (see `ENV`) or a flag."""

    exec_urls: list[str] = field(default_factory=list)
    """Exec servers to spread leases over (`SWE_POOL_EXEC_URLS`, comma-separated, required)."""
    exec_token: str = field(default="", repr=False)
    """Bearer token the pool sends to exec servers (`SWE_EXEC_TOKEN` / `SWE_EXEC_TOKEN_FILE`)."""
    pool_token: str = field(default="", repr=False)
    """Bearer token clients must send (`SWE_POOL_TOKEN` / `SWE_POOL_TOKEN_FILE`, required). It must differ
    from the exec token: rollout workers hold this one and must never hold the nodes' token."""
    operator_token: str = field(default="", repr=False)
    """Bearer token of operators (`SWE_POOL_OPERATOR_TOKEN` / `SWE_POOL_OPERATOR_TOKEN_FILE`, optional): it
    may do all a client may, and `/status` shows it every lease; a client's token sees counts only."""
    signing_key_file: str = ""
    """The pool's Ed25519 key that signs per-lease credentials (`SWE_POOL_SIGNING_KEY_FILE`, PEM; made,
    mode 600, on first start; default beside the lease database). Its public half goes to the nodes."""
    credential_ttl: float = 6 * 3600.0
    """Seconds a per-lease credential is good for (`SWE_POOL_CREDENTIAL_TTL`); a client renews it
    (`POST /credential`) before it runs out."""
    host: str = "127.0.0.1"
    """Address to bind (`SWE_POOL_HOST`). Loopback unless told otherwise."""
    port: int = 18090
    """Port to bind (`SWE_POOL_PORT`)."""
    pool_id: str = ""
    """Owner label written on our containers (`SWE_POOL_ID`, default hostname:port); reconciliation
    destroys containers with this owner that no lease knows, so two pools must never share it."""
    db_path: str = ""
    """SQLite file of live leases (`SWE_POOL_DB`, default ~/.cache/swe-rl/pool-<port>.db)."""
    database_url: str = field(default="", repr=False)
    """PostgreSQL URL of a lease record shared by several pool replicas (`SWE_POOL_DATABASE_URL`; needs the
    `replicas` extra). Empty (the default): one pool process with its SQLite file. Every replica of one
    pool has the same `SWE_POOL_ID`, exec servers and database; a replica never releases leases on exit."""
    sync_interval: float = 1.0
    """Seconds between a replica's passes over the shared record (`SWE_POOL_SYNC_INTERVAL`): its heartbeats
    pushed, expired leases taken (each by one replica), leases others released dropped, node loads counted."""
    lease_ttl: float = 300.0
    """Seconds without heartbeat or call before a lease is reclaimed (`SWE_POOL_LEASE_TTL`)."""
    max_per_node: int = 15
    """Leases per node at most, allocations in flight included (`SWE_POOL_MAX_PER_NODE`)."""
    health_interval: float = 5.0
    """Seconds between health checks of each node (`SWE_POOL_HEALTH_INTERVAL`)."""
    node_down_after: int = 2
    """Consecutive failed health checks that mark a node down (`SWE_POOL_NODE_DOWN_AFTER`)."""
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
    call_replay_seconds: float = 120.0
    """How long the answer of a named container call is kept for a client that sends it again (call_replay.py)."""
    call_replay_bytes: int = 64 << 20
    """Most bytes of kept answers; the oldest are dropped first (a resend of a dropped one gets a 503)."""
    images_interval: float = 60.0
    """Seconds between refreshes of each node's image list, used for image affinity (`SWE_POOL_IMAGES_INTERVAL`)."""
    tls_cert: str = ""
    """PEM certificate (chain) to serve HTTPS with (`SWE_POOL_TLS_CERT`, `--tls-cert`), with `tls_key`; unset:
    plain HTTP. Set, the pool reaches its nodes over HTTPS only (an http:// exec URL is refused)."""
    tls_key: str = field(default="", repr=False)
    """PEM private key of `tls_cert` (`SWE_POOL_TLS_KEY`, `--tls-key`)."""
    exec_ca_file: str = ""
    """CA file (PEM) the nodes' certificates are checked against (`SWE_POOL_EXEC_CA_FILE`, `--exec-ca-file`);
    unset: the system's CAs. Set, every exec URL must be https://."""
    loop: str = "auto"
    """uvicorn's event loop (`SWE_POOL_LOOP`: auto, uvloop or asyncio); auto takes uvloop where it imports."""
    http: str = "auto"
    """uvicorn's HTTP parser (`SWE_POOL_HTTP`: auto, httptools or h11); auto takes httptools where it imports.
    The plain ones are the baseline of bench/route_bench.py."""

    @property
    def idle_ttl(self) -> float:
        """Idle TTL asked of exec servers: above the lease TTL, so only a dead pool lets them reap."""
        return self.lease_ttl + max(120.0, self.lease_ttl)

    @property
    def effective_touch_interval(self) -> float:
        return max(0.2, min(self.touch_interval, self.lease_ttl / 4))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PoolConfig:
        """Defaults, then the variables of `ENV` (from `env`, default the process environment)."""
        return cls(**read_env(ENV, field_types(cls), env))

    def finalize(self) -> PoolConfig:
        """Fill port-dependent defaults and refuse settings the pool cannot run with."""
        self.pool_id = (self.pool_id or f"{socket.gethostname()}:{self.port}")[:128]
        self.db_path = os.path.expanduser(self.db_path or f"~/.cache/swe-rl/pool-{self.port}.db")
        if self.database_url:  # the leases are every replica's: one stopping releases none of them
            self.keep_leases_on_exit = True
            if self.sync_interval <= 0:
                raise SystemExit("error: SWE_POOL_SYNC_INTERVAL must be positive")
        if self.database_url and not self.signing_key_file:
            raise SystemExit(
                "error: pool replicas sign lease credentials with one key: set SWE_POOL_SIGNING_KEY_FILE to the"
                " same key file on every replica (each checks the credentials the others issued)"
            )
        if not self.signing_key_file:
            base = self.db_path if self.db_path != ":memory:" else f"~/.cache/swe-rl/pool-{self.port}.db"
            self.signing_key_file = os.path.splitext(os.path.expanduser(base))[0] + ".key"
        if not self.exec_urls:
            raise SystemExit(
                "error: no exec servers: set SWE_POOL_EXEC_URLS (comma-separated) or --exec-urls"
            )
        if not self.exec_token:
            raise SystemExit(
                "error: no exec token: set SWE_EXEC_TOKEN or SWE_EXEC_TOKEN_FILE (or --exec-token-file)"
            )
        if not self.pool_token:
            raise SystemExit(
                "error: no client token: set SWE_POOL_TOKEN or SWE_POOL_TOKEN_FILE (or --token-file); it must"
                " differ from the exec token (rollout workers hold it, never the nodes' token)"
            )
        if self.pool_token == self.exec_token:
            raise SystemExit(
                "error: SWE_POOL_TOKEN equals SWE_EXEC_TOKEN: give the pool's clients a token of their own "
                "(rollout workers must never hold the nodes' token)"
            )
        if self.operator_token and self.operator_token in (self.pool_token, self.exec_token):
            raise SystemExit("error: SWE_POOL_OPERATOR_TOKEN must differ from the client and exec tokens")
        if self.credential_ttl <= 0:
            raise SystemExit("error: SWE_POOL_CREDENTIAL_TTL must be positive")
        if self.lease_ttl <= 0 or self.max_per_node <= 0 or self.node_down_after <= 0:
            raise SystemExit("error: lease TTL, per-node cap and node-down-after must be positive")
        self.check_tls()
        if self.loop not in ("auto", "uvloop", "asyncio") or self.http not in ("auto", "httptools", "h11"):
            raise SystemExit(
                f"error: SWE_POOL_LOOP must be auto, uvloop or asyncio (got {self.loop!r}) and "
                f"SWE_POOL_HTTP auto, httptools or h11 (got {self.http!r})"
            )
        return self

    @property
    def tls(self) -> bool:
        """Whether TLS is on: the pool serves HTTPS, or checks its nodes against a CA of its own."""
        return bool(self.tls_cert or self.exec_ca_file)

    def check_tls(self) -> None:
        """Exit with the reason when the TLS settings cannot work: half a key pair, a file that does not
        load, or a plain http:// node while TLS is on (the node's token would cross in clear text)."""
        try:
            pair = server_files(self.tls_cert, self.tls_key, "SWE_POOL_TLS_CERT/SWE_POOL_TLS_KEY")
            self.tls_cert, self.tls_key = pair or ("", "")
            if self.exec_ca_file:
                client_context(self.exec_ca_file)
            if self.tls:
                require_https(self.exec_urls, "SWE_POOL_EXEC_URLS", "the pool speaks TLS")
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None


def _urls(text: str) -> list[str]:
    return [u.strip().rstrip("/") for u in text.split(",") if u.strip()]


ENV: dict[str, EnvVar] = prefixed(
    "SWE_POOL_",
    [f.name for f in fields(PoolConfig)],
    exec_urls=EnvVar("SWE_POOL_EXEC_URLS", old=("SWE_EXEC_SERVER_URLS",), parse=_urls),
    exec_token=EnvVar("SWE_EXEC_TOKEN", file="SWE_EXEC_TOKEN_FILE", parse=str.strip),
    pool_token=EnvVar("SWE_POOL_TOKEN", file="SWE_POOL_TOKEN_FILE", parse=str.strip),
    operator_token=EnvVar("SWE_POOL_OPERATOR_TOKEN", file="SWE_POOL_OPERATOR_TOKEN_FILE", parse=str.strip),
    pool_id=EnvVar("SWE_POOL_ID"),
    db_path=EnvVar("SWE_POOL_DB"),
    database_url=EnvVar("SWE_POOL_DATABASE_URL", file="SWE_POOL_DATABASE_URL_FILE", parse=str.strip),
    lease_ttl=EnvVar("SWE_POOL_LEASE_TTL", old=("SWE_LEASE_TTL",)),
    max_per_node=EnvVar("SWE_POOL_MAX_PER_NODE", old=("SWE_MAX_CONTAINERS_PER_NODE",)),
    health_interval=EnvVar("SWE_POOL_HEALTH_INTERVAL", old=("SWE_HEALTH_INTERVAL",)),
    node_down_after=EnvVar("SWE_POOL_NODE_DOWN_AFTER", old=("SWE_NODE_DOWN_AFTER",)),
)
"""The variable of each `PoolConfig` field: `SWE_POOL_<FIELD>`, except the exec servers' shared token
(`SWE_EXEC_TOKEN` / `SWE_EXEC_TOKEN_FILE`, the names the exec servers read) and the renamed ones."""
