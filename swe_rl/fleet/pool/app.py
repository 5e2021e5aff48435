"""The pool server's HTTP face: Starlette routes, bearer auth, body limits, errors as JSON; and `main()`.

Every endpoint but /healthz needs the bearer token; bad input gets a 4xx JSON error, never a stack
trace. Run it as `swe-pool-server` or `python -m swe_rl.fleet.pool.app` (settings: `SWE_*` variables
of `config.PoolConfig`, or flags).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from swe_rl.fleet.call_headers import (
    BOOT_HEADER,
    CALL_ID_HEADER,
    NODE_SECONDS_HEADER,
    NODE_WAIT_HEADER,
    POOL_OVERHEAD_HEADER,
    POOL_OWN_HEADER,
    RESENT_HEADER,
)
from swe_rl.fleet.checks import InvalidRequest, parse_body
from swe_rl.fleet.lease_credential import CREDENTIAL_HEADER
from swe_rl.fleet.pool import __version__
from swe_rl.fleet.pool.call_replay import Answer
from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.pool.credentials import LEASE_OPS
from swe_rl.fleet.pool.metrics import metrics_text, status_of
from swe_rl.fleet.pool.pool import Pool
from swe_rl.fleet.pool.prefetch import prefetch
from swe_rl.fleet.pool.routing import ROUTED_OPS
from swe_rl.fleet.protocol import ApiError
from swe_rl.fleet.settings import read_token

log = logging.getLogger("swe_pool_server")


def error_response(exc: ApiError) -> JSONResponse:
    """The JSON error answer of an ApiError (`protocol.error_body`), with its headers (Retry-After)."""
    return JSONResponse(exc.body(), exc.status, headers=exc.headers)


def outcome_of(exc: ApiError) -> str:
    """The metrics label of an error answer."""
    if exc.status == 401:
        return "unauthorized"
    if exc.extra.get("lease_lost"):
        return "lease_lost"
    if exc.extra.get("node_down"):
        return "node_down"
    if exc.status == 504:
        return "timeout"
    return "client_error" if exc.status < 500 else "error"


STATUS_PAGE = 1000
"""Leases on one page of GET /status by default (and at most 10 times as many)."""


def _count(query: dict[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    if not text.isdigit() or (name == "limit" and not 0 < int(text) <= 10 * STATUS_PAGE):
        top = f" from 1 to {10 * STATUS_PAGE}" if name == "limit" else ""
        raise ApiError(400, f"query parameter {name!r} must be a whole number{top} (got {text!r})")
    return int(text)


def create_app(pool: Pool) -> Starlette:
    """The pool's routes; the lifespan starts and stops the pool."""
    token = pool.cfg.pool_token.encode()
    operator_token = pool.cfg.operator_token.encode()
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
        except InvalidRequest as exc:
            raise ApiError(exc.status, exc.message) from None

    async def answer(run: Callable[[], Awaitable[Any]]) -> Answer:
        """A handler's result or ApiError as the HTTP answer, with its outcome label."""
        try:
            result = await run()
        except ApiError as exc:
            return error_response(exc), outcome_of(exc)
        if isinstance(result, Response):
            return result, "ok"
        status, data = result if isinstance(result, tuple) else (200, result)
        outcome = "ok" if status < 400 else "client_error" if status < 500 else "error"
        return JSONResponse(data, status), outcome

    def endpoint(op: str, handler: Any, *, auth: bool = True, json_body: bool = True) -> Any:
        """Wrap a handler with auth, JSON parsing, call replay (`call_replay.py`), error mapping and metrics."""

        async def view(request: Request) -> Response:
            t0 = time.monotonic()
            outcome = "ok"
            try:
                operator = False
                if auth:
                    header = request.headers.get("authorization", "")
                    supplied = header[7:].encode() if header.startswith("Bearer ") else b""
                    operator = bool(operator_token) and hmac.compare_digest(supplied, operator_token)
                    if not operator and not hmac.compare_digest(supplied, token):
                        raise ApiError(401, "unauthorized: missing or wrong bearer token")
                if not json_body:  # a GET: its query parameters are its arguments
                    query = dict(request.query_params)
                    query.pop("operator", None)  # said by the token, never by the caller
                    if operator:
                        query["operator"] = "1"
                    response, outcome = await answer(lambda: handler(query))
                else:
                    body = {**await body_of(request), **request.path_params}
                    if op in LEASE_OPS and not operator and "lease_id" in body:
                        # a call on a lease: only with that lease's credential (credentials.py); without a
                        # lease id it is the handler's 400 (a close by request id needs none)
                        pool.credentials.check(
                            request.headers.get(CREDENTIAL_HEADER), op, body.get("lease_id")
                        )
                    call_id = request.headers.get(CALL_ID_HEADER)
                    if call_id:
                        key = (op, str(body.get("lease_id", "")))
                        resent_by = request.headers.get(RESENT_HEADER)
                        response, outcome = await pool.replays.run(
                            call_id, key, resent_by, lambda: answer(lambda: handler(body))
                        )
                    else:
                        response, outcome = await answer(lambda: handler(body))
            except ApiError as exc:
                response, outcome = error_response(exc), outcome_of(exc)
            except ClientDisconnect:  # the caller went away mid-request (cancelled, timed out): not our error
                log.info("client disconnected during %s", request.url.path)
                outcome = "client_gone"
                response = Response(status_code=499)  # nobody reads it: the common "client closed" status
            except Exception as exc:  # never a stack trace to the caller
                log.exception("unhandled error on %s", request.url.path)
                outcome = "error"
                response = JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)
            finally:
                if json_body:
                    pool.metrics.inc("swe_pool_calls_total", op=op, outcome=outcome)
                    pool.metrics.observe(op, time.monotonic() - t0)
            spent = time.monotonic() - t0  # one end for both shares below (they are compared)
            node_seconds = response.headers.get(NODE_SECONDS_HEADER)
            if node_seconds is not None:  # a routed call the node answered: the pool's share of its time
                overhead = spent - float(node_seconds)
                pool.metrics.observe_overhead(op, overhead)
                response.headers[POOL_OVERHEAD_HEADER] = f"{max(0.0, overhead):.6f}"
            node_wait = response.headers.get(NODE_WAIT_HEADER)
            if node_wait is not None:  # the pool's own part: its work and its loop's lag, nothing of the node
                own = spent - float(node_wait)
                response.headers[POOL_OWN_HEADER] = f"{max(0.0, own):.6f}"
            response.headers[BOOT_HEADER] = pool.replays.boot
            return response

        return view

    async def healthz(query: dict[str, str]) -> Response:
        healthy = len(pool.nodes.healthy())
        if not pool.ready:  # serving already (calls wait for their node), not every node checked yet
            checked = sum(1 for n in pool.nodes if n.checked.is_set())
            return JSONResponse(
                {
                    "ok": False,
                    "starting": True,
                    "nodes_checked": checked,
                    "nodes_healthy": healthy,
                    "nodes_total": len(pool.nodes.nodes),
                    "leases": len(pool.leases),
                    "version": __version__,
                },
                503,
            )
        return JSONResponse(
            {
                "ok": healthy > 0,
                "nodes_healthy": healthy,
                "nodes_total": len(pool.nodes.nodes),
                "leases": len(pool.leases),
                "version": __version__,
            }
        )

    async def status(query: dict[str, str]) -> dict[str, Any]:
        """Every node, and one page of the leases (`offset`, `limit`): 50,000 leases are 9 MB. Leases are
        listed to the operator token only: a client's token sees the nodes and the totals."""
        operator = query.pop("operator", None) == "1"
        offset, limit = _count(query, "offset", 0), _count(query, "limit", STATUS_PAGE)
        answer = status_of(pool, offset=offset, limit=limit if operator else 0)
        if not operator:
            answer["leases_page"] = {"offset": 0, "count": 0, "next": None, "operator_only": True}
        return answer

    async def metrics(query: dict[str, str]) -> Response:
        return PlainTextResponse(metrics_text(pool), media_type="text/plain; version=0.0.4")

    async def heartbeat(body: dict[str, Any]) -> dict[str, Any]:
        return await pool.beat(body)  # (loads leases another replica allocated first)

    def routed(op: str) -> Any:
        return lambda body: pool.route(op, body)

    def whole_fleet(handler: Any) -> Any:
        """A call over every node: it waits for the first pass over the fleet after a start."""

        async def call(body: dict[str, Any]) -> Any:
            await pool.whole_fleet_checked()
            return await handler(body)

        return call

    routes = [
        Route("/healthz", endpoint("healthz", healthz, auth=False, json_body=False), methods=["GET"]),
        Route("/status", endpoint("status", status, json_body=False), methods=["GET"]),
        Route("/metrics", endpoint("metrics", metrics, json_body=False), methods=["GET"]),
        Route("/allocate", endpoint("allocate", pool.allocate), methods=["POST"]),
        Route("/heartbeat", endpoint("heartbeat", heartbeat), methods=["POST"]),
        Route("/close", endpoint("close", pool.close), methods=["POST"]),
        Route("/credential", endpoint("credential", pool.renew_credential), methods=["POST"]),
        Route("/warm", endpoint("warm", pool.warm), methods=["POST"]),
        Route("/leases/{lease_id}/snapshot", endpoint("snapshot", pool.snapshots.take), methods=["POST"]),
        Route(
            "/snapshots/delete",
            endpoint("snapshot_delete", whole_fleet(pool.snapshots.delete)),
            methods=["POST"],
        ),
        Route(
            "/prefetch",
            endpoint("prefetch", whole_fleet(lambda body: prefetch(pool, body))),
            methods=["POST"],
        ),
        *(Route(f"/{op}", endpoint(op, routed(op)), methods=["POST"]) for op in ROUTED_OPS),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse(
            {"error": f"{exc.status_code}: {exc.detail}"}, exc.status_code, headers=exc.headers
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.start()
        # What the start made (modules, routes, the leases loaded) lives as long as the process: out of
        # the collector's reach, so its full collections, which stop every call, scan only what came since.
        gc.freeze()
        try:
            yield
        finally:
            await pool.stop()

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)


def _raise_fd_limit() -> None:
    """Thousands of leases mean thousands of sockets: lift the soft descriptor limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 16, hard)
            )
    except (ImportError, ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit: %s", exc)


def main(argv: list[str] | None = None) -> None:
    cfg = PoolConfig.from_env()
    p = argparse.ArgumentParser(description="swe-rl pool server: leases containers over exec servers")
    p.add_argument("--exec-urls", help="comma-separated exec server URLs (SWE_POOL_EXEC_URLS)")
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
    p.add_argument(
        "--keep-leases-on-exit",
        action="store_true",
        default=cfg.keep_leases_on_exit,
        help="keep containers and leases at shutdown (rolling restart)",
    )
    p.add_argument(
        "--tls-cert", default=cfg.tls_cert, help="serve HTTPS with this PEM certificate (SWE_POOL_TLS_CERT)"
    )
    p.add_argument("--tls-key", default=cfg.tls_key, help="the certificate's PEM key (SWE_POOL_TLS_KEY)")
    p.add_argument(
        "--exec-ca-file",
        default=cfg.exec_ca_file,
        help="CA of the nodes' certificates (SWE_POOL_EXEC_CA_FILE)",
    )
    p.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "INFO"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per exec call is noise
    if a.exec_urls:
        cfg.exec_urls = [u.strip().rstrip("/") for u in a.exec_urls.split(",") if u.strip()]
    if a.exec_token_file:
        cfg.exec_token = read_token("", a.exec_token_file)
    if a.token_file:
        cfg.pool_token = read_token("", a.token_file)
    cfg.host, cfg.port, cfg.pool_id, cfg.db_path = a.host, a.port, a.pool_id or "", a.db or ""
    cfg.lease_ttl, cfg.max_per_node, cfg.reap_interval = a.lease_ttl, a.max_per_node, a.reap_interval
    cfg.health_interval, cfg.node_down_after = a.health_interval, a.node_down_after
    cfg.keep_leases_on_exit = a.keep_leases_on_exit
    cfg.tls_cert, cfg.tls_key, cfg.exec_ca_file = a.tls_cert, a.tls_key, a.exec_ca_file
    cfg.finalize()
    _raise_fd_limit()
    log.info(
        "pool %s on %s://%s:%d over %d exec servers (ttl %.0fs, cap %d/node)",
        cfg.pool_id,
        "https" if cfg.tls_cert else "http",
        cfg.host,
        cfg.port,
        len(cfg.exec_urls),
        cfg.lease_ttl,
        cfg.max_per_node,
    )
    uvicorn.run(
        create_app(Pool(cfg)),
        host=cfg.host,
        port=cfg.port,
        log_level=a.log_level.lower(),
        access_log=False,
        loop=cfg.loop,
        http=cfg.http,
        timeout_graceful_shutdown=cfg.shutdown_grace,
        timeout_keep_alive=30,
        ssl_certfile=cfg.tls_cert or None,
        ssl_keyfile=cfg.tls_key or None,
    )


if __name__ == "__main__":
    main()
