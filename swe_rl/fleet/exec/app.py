"""Exec server: the HTTP face of one node (`swe-exec-server`, systemd unit in server/, port 5000).

It deploys alone: Flask, waitress and the node's backend (`SWE_EXEC_BACKEND`: the Docker SDK by
default, `memory` for load tests; `backend.py`), nothing of `swe_rl` outside the fleet package. The pool server on the GPU head node is its only normal caller. Every endpoint but
`/healthz` needs the bearer token; bad input gets a 4xx with a JSON error (`{"error": ...}`),
never a stack trace; the backend's messages are passed on without host paths.

The work itself is in the sibling modules: `validation` (bodies into the protocol's models),
`operations`, `containers`, `warm`, `reaper`, `executor`, put together by `manager`.
"""

from __future__ import annotations

import _thread
import argparse
import gc
import hmac
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from flask import Flask, g, jsonify, request
from werkzeug.exceptions import HTTPException

from swe_rl.fleet.call_headers import NODE_SECONDS_HEADER
from swe_rl.fleet.checks import InvalidRequest, parse_body
from swe_rl.fleet.exec import validation as v
from swe_rl.fleet.exec.arrival import arrival
from swe_rl.fleet.exec.backend import BackendError, NodeBackend, backend_class
from swe_rl.fleet.exec.command_flow import Flow, FlowRun, Started
from swe_rl.fleet.exec.config import ExecConfig, node_memory
from swe_rl.fleet.exec.direct_calls import DirectCalls
from swe_rl.fleet.exec.drain import Drain
from swe_rl.fleet.exec.health import HealthMonitor
from swe_rl.fleet.exec.health_lane import health_lane
from swe_rl.fleet.exec.manager import ContainerManager
from swe_rl.fleet.exec.parking import PARK_KEY, Parked, Slot, park_requests
from swe_rl.fleet.exec.snapshot_routes import add_snapshot_routes
from swe_rl.fleet.exec.tls_front import PrivateSocketDir, TlsFront
from swe_rl.fleet.image_protocol import NodePrefetchAnswer, NodePrefetchRequest
from swe_rl.fleet.image_protocol import parse as parse_image_request
from swe_rl.fleet.lease_credential import LEASE_SCHEME
from swe_rl.fleet.protocol import ApiError, DestroyRequest, parse
from swe_rl.fleet.settings import read_token
from swe_rl.fleet.tls import server_context, server_files

__version__ = "0.1.0"
log = logging.getLogger("swe_exec_server")


def create_app(manager: ContainerManager) -> Flask:
    cfg = manager.config
    app = Flask("swe_exec_server")
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]

    drain = Drain()
    app.extensions["swe_drain"] = drain
    direct = DirectCalls(manager.registry, cfg.state_dir, cfg.lease_keys)
    app.extensions["swe_direct"] = direct

    @app.before_request
    def _auth() -> Any:
        g.t0 = arrival(request.environ)
        if request.path == "/healthz":
            return None
        slot = request.environ.get(PARK_KEY)
        if slot is not None and slot.resumed:  # a parked call, resumed: authorized and counted when it came
            for key, value in slot.kept.items():
                setattr(g, key, value)
            return None
        header = request.headers.get("Authorization", "")
        if header.startswith(LEASE_SCHEME):  # a lease holder's direct call (direct_calls.py)
            try:
                g.grant = direct.authorize(request.path, header)
            except ApiError as exc:
                return jsonify(exc.body()), exc.status
        else:
            supplied = header[7:] if header.startswith("Bearer ") else ""
            if not cfg.token or not hmac.compare_digest(supplied.encode(), cfg.token.encode()):
                return jsonify(error="unauthorized: missing or wrong bearer token"), 401
        if drain.refuses(request.path):
            return jsonify(drain.refusal()), 503
        drain.enter()
        g.in_flight = True
        return None

    @app.teardown_request
    def _left(exc: BaseException | None) -> None:
        if isinstance(exc, Parked):  # still in flight: its command runs, the resumed call ends it
            return
        if g.pop("in_flight", False):
            drain.leave()

    @app.after_request
    def _node_seconds(response: Any) -> Any:
        """The node's own time for the call, so the pool can tell its overhead apart (`forward`)."""
        if g.get("grant") is not None and g.get("granted"):
            direct.done(request.path, response.status_code)
        t0 = g.get("t0")
        if t0 is not None:
            response.headers[NODE_SECONDS_HEADER] = f"{time.monotonic() - t0:.6f}"
        return response

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Any:
        resp = jsonify(exc.body())
        resp.status_code = exc.status
        resp.headers.update(exc.headers)
        if exc.status == 429:
            resp.headers["Retry-After"] = "2"
        return resp

    @app.errorhandler(InvalidRequest)
    def _bad_request(exc: InvalidRequest) -> Any:
        return jsonify(error=exc.message), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Any:
        resp = jsonify(error=f"{exc.name}: {exc.description}")
        resp.status_code = exc.code or 500
        return resp

    @app.errorhandler(BackendError)
    def _backend_error(exc: BackendError) -> Any:
        reason = manager.scrub(exc.message)
        log.warning("%s error: %s", cfg.backend, reason)
        # A refusal is the request's fault (e.g. a limit the backend refuses); a failure is the node's.
        return jsonify(error=f"{cfg.backend}: {reason}"), exc.status

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Any:
        log.exception("unhandled error on %s", request.path)
        return jsonify(error=f"internal error: {type(exc).__name__}: {exc}"), 500

    def body() -> dict[str, Any]:
        data = parse_body(request.get_data(cache=False))
        grant = g.get("grant")
        if grant is not None:  # a direct call: only on the credential's own container and lease
            direct.check_body(request.path, grant, data)
            g.granted = True
        return data

    def resources() -> dict[str, Any]:
        total, available = node_memory()
        return {"memory_total": total, "memory_available": available, "cpus": os.cpu_count() or 1}

    # The backend's ping runs on a thread of its own (health.py): a hung daemon never holds the answer.
    monitor = HealthMonitor(lambda: (manager.backend.health(), {}))
    app.extensions["swe_health"] = monitor

    @app.get("/healthz")
    def healthz() -> Any:
        """The last ping of `monitor` (stale after 4 s: unhealthy) and the node's figures, taken now
        (registry and image-store locks are never held across a backend call)."""
        healthy, health = monitor.current()
        managed = manager.count()
        leased = manager.leased_count()
        # Warm containers are evicted for a lease, so they are not taken from `free`.
        return jsonify(
            ok=healthy,
            docker=healthy,  # the field's old name, kept on the wire
            **health,
            draining=drain.draining,
            server_id=cfg.server_id,
            version=__version__,
            backend=cfg.backend,
            running_containers=managed,
            managed_containers=managed,
            leased_containers=leased,
            capacity=cfg.max_containers,
            free=max(0, cfg.max_containers - leased),
            max_warm=cfg.max_warm,
            warm_dropped=len(manager.warm_pool.dropped()),
            **manager.warm_pool.counts(),
            **resources(),
            images=manager.images.counts(),
            calls_in_flight=drain.in_flight,
            lease_keys=direct.keys,
            direct_calls=dict(direct.counts),
        ), (200 if healthy else 503)

    @app.get("/images")
    def images() -> Any:
        tags = sorted(t for img in manager.backend.list_images() for t in img.tags)
        return jsonify(images=tags, count=len(tags))

    @app.post("/images/prefetch")
    def images_prefetch() -> Any:
        """Pull these images ahead (background, within the disk budget); answers at once."""
        req = parse_image_request(NodePrefetchRequest, body())
        store = manager.images
        states = store.prefetch(req.images)
        return jsonify(
            NodePrefetchAnswer(images=states, bytes_used=store.bytes_used, budget=store.budget).model_dump()
        )

    @app.get("/status")
    def status() -> Any:
        recs = [r.public() for r in manager.records()]
        warm = manager.warm_pool
        return jsonify(
            server_id=cfg.server_id,
            version=__version__,
            backend=cfg.backend,
            capacity=cfg.max_containers,
            managed_containers=len(recs),
            containers=recs,
            **warm.counts(),
            warm_targets=warm.targets(),
            warm_stats=manager.warm_stats,
            warm_dropped=warm.dropped(),
            **resources(),
            defaults={
                "memory": cfg.memory,
                "cpus": cfg.cpus,
                "pids_limit": cfg.pids_limit,
                "idle_ttl": cfg.idle_ttl,
                "max_lifetime": cfg.max_lifetime,
                "max_output_bytes": cfg.max_output_bytes,
                "max_warm": cfg.max_warm,
                "warm_ttl": cfg.warm_ttl,
                "warm_min_free_memory": cfg.warm_min_free_memory,
            },
        )

    ops = manager.ops
    # Calls that wait for commands: parked while a command runs (`parking.py`, `command_flow.py`).
    flows: dict[str, Callable[[dict[str, Any]], Flow[dict[str, Any]]]] = {
        "/container/exec": lambda b: ops.exec_flow(v.exec_request(b, cfg)),
        "/container/diff": lambda b: ops.diff_flow(v.diff_request(b)),
        "/container/evaluate": lambda b: ops.evaluate_flow(v.evaluate_request(b, cfg)),
    }
    for path, make in flows.items():
        app.add_url_rule(path, path, _flow_route(make, body, manager.backend), methods=["POST"])
    routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "/container/create": lambda b: manager.create(v.create_request(b, cfg)),
        "/container/write_file": lambda b: ops.write_file(v.write_file_request(b)),
        "/container/read_file": lambda b: ops.read_file(v.read_file_request(b, cfg)),
        "/container/destroy": lambda b: manager.destroy(parse(DestroyRequest, b).container_id),
        "/warm": lambda b: manager.warm(v.warm_request(b, cfg)),
    }
    for path, handler in routes.items():
        app.add_url_rule(path, path, _json_route(handler, body), methods=["POST"])

    @app.post("/containers/touch")
    def touch() -> Any:
        data = body()
        touched, missing = manager.touch(v.container_ids(data))
        if data.get("report_used") is True:  # the pool's periodic touch: what lease holders called directly
            return jsonify(touched=len(touched), missing=missing, used=direct.take_used())
        return jsonify(touched=len(touched), missing=missing)

    @app.post("/lease-keys")
    def lease_keys() -> Any:
        """Trust the pool's public key(s) for direct calls (`direct_calls.py`); the node's token only."""
        return jsonify(keys=direct.add_keys(body().get("keys")))

    add_snapshot_routes(app, manager.snapshots)
    return app


def _json_route(
    handler: Callable[[dict[str, Any]], dict[str, Any]], body: Callable[[], dict[str, Any]]
) -> Any:
    def view() -> Any:
        return jsonify(handler(body()))

    return view


KEPT = ("grant", "granted", "in_flight")
"""What a parked call keeps for its resumed one (`g`): its lease credential's grant and its drain count."""


def _flow_route(
    make: Callable[[dict[str, Any]], Flow[dict[str, Any]]],
    body: Callable[[], dict[str, Any]],
    backend: NodeBackend,
) -> Any:
    def view() -> Any:
        slot: Slot | None = request.environ.get(PARK_KEY)
        run: FlowRun[dict[str, Any]] = (
            slot.state if slot is not None and slot.resumed else FlowRun(make(body()), backend)
        )
        if slot is None:  # a server that cannot park: the thread waits, as it always did
            return jsonify(run.step())

        def park(started: Started) -> NoReturn:
            slot.kept = {key: g.get(key) for key in KEPT}
            slot.park(run, started.on_end)

        return jsonify(run.step(park))

    return view


# --------------------------------------------------------------------------- main


def parse_config(argv: list[str] | None = None) -> ExecConfig:
    """`ExecConfig.from_env()` with the command-line flags on top; logging set up; a token required."""
    cfg = ExecConfig.from_env()
    p = argparse.ArgumentParser(description="swe-rl exec server: owns one Docker node's task containers")
    p.add_argument("--host", default=cfg.host)
    p.add_argument("--port", type=int, default=cfg.port)
    p.add_argument("--server-id", default=cfg.server_id)
    p.add_argument("--token-file", default=None, help="read the bearer token from this file")
    p.add_argument("--max-containers", type=int, default=cfg.max_containers)
    p.add_argument("--threads", type=int, default=cfg.threads)
    p.add_argument("--reap-interval", type=float, default=cfg.reap_interval)
    p.add_argument(
        "--tls-cert", default=cfg.tls_cert, help="serve HTTPS with this PEM certificate (SWE_EXEC_TLS_CERT)"
    )
    p.add_argument("--tls-key", default=cfg.tls_key, help="the certificate's PEM key (SWE_EXEC_TLS_KEY)")
    p.add_argument("--log-level", default=os.environ.get("SWE_LOG_LEVEL", "INFO"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg.host, cfg.port, cfg.server_id = a.host, a.port, a.server_id
    try:
        cfg.tls_cert, cfg.tls_key = server_files(
            a.tls_cert, a.tls_key, "SWE_EXEC_TLS_CERT/SWE_EXEC_TLS_KEY"
        ) or ("", "")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    cfg.max_containers, cfg.threads, cfg.reap_interval = a.max_containers, a.threads, a.reap_interval
    if a.token_file:
        cfg.token = read_token("", a.token_file)
    if not cfg.token:
        raise SystemExit("error: no token: set SWE_EXEC_TOKEN or SWE_EXEC_TOKEN_FILE (or --token-file)")
    return cfg


def serve(cfg: ExecConfig) -> None:
    """Adopt and reap this node's containers, start the background threads, serve until SIGTERM."""
    import waitress.server

    manager = ContainerManager(cfg)
    reaped = manager.reap_once()
    log.info(
        "exec server %s on %s:%d; adopted %d containers, reaped %d",
        cfg.server_id,
        cfg.host,
        cfg.port,
        len(manager.records()),
        len(reaped),
    )
    manager.start_background()
    app = create_app(manager)
    app.extensions["swe_health"].start()

    drain: Drain = app.extensions["swe_drain"]

    def _drained() -> None:
        """Wait for the calls in flight (up to `drain_seconds`), then stop the server's loop."""
        left = drain.wait(cfg.drain_seconds)
        drain.close()  # what still arrives is refused unstarted (503 not_started): safe to send again
        if left:
            log.warning("stopping with %d call(s) still running after %gs", left, cfg.drain_seconds)
        destroyed = manager.stop()
        log.info(
            "stopped: destroyed %d unclaimed warm containers; leased ones stay for the next start", destroyed
        )
        _thread.interrupt_main()  # the loop runs on the main thread: it ends there (below)

    def _term(signum: int, frame: Any) -> None:
        if drain.draining:
            return
        drain.begin()
        log.info("SIGTERM: draining (%d call(s) in flight; new containers go elsewhere)", drain.in_flight)
        threading.Thread(target=_drained, name="swe-drain", daemon=True).start()

    signal.signal(signal.SIGTERM, _term)
    # The drain ends the loop with a KeyboardInterrupt (`interrupt_main`), which needs Python's own SIGINT
    # handler: a shell starts a background job with SIGINT ignored, and the server then never stopped.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # What the start made (modules, the app, adopted containers) out of the collector's reach: its full
    # collections stop every request's thread, and would otherwise rescan all of it each time.
    gc.freeze()
    # With TLS, waitress listens on a private Unix socket behind the TLS front (tls_front.py says why).
    sockets = PrivateSocketDir() if cfg.tls_cert else None
    where = (
        {"unix_socket": sockets.socket, "unix_socket_perms": "600"}
        if sockets
        else {"host": cfg.host, "port": cfg.port}
    )
    server = waitress.server.create_server(
        app,
        **where,
        threads=cfg.threads,
        channel_timeout=cfg.max_timeout + 60,
        connection_limit=max(1000, cfg.threads * 4),
        ident="swe-exec-server",
        clear_untrusted_proxy_headers=True,
        asyncore_use_poll=True,  # select() cannot watch descriptors past 1024
    )
    health_lane(park_requests(server))  # parking channels stamp arrivals too (`arrival.py`)
    front = None
    try:
        if sockets is not None:
            front = TlsFront(cfg.host, cfg.port, server_context(cfg.tls_cert, cfg.tls_key), sockets.socket)
            front.start()  # binds here: an address in use fails the start, its socket directory removed
            log.info("serving HTTPS on %s:%d", cfg.host, cfg.port)
        server.run()
    except KeyboardInterrupt:  # the drain's end (or Ctrl-C)
        if not drain.draining:
            manager.stop()
    finally:
        if front is not None:
            front.stop()
        if sockets is not None:
            sockets.close()
    log.info("exec server %s stopped", cfg.server_id)


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(argv)
    try:
        backend_class(cfg.backend)
    except ValueError as exc:
        raise SystemExit(f"error: SWE_EXEC_BACKEND: {exc}") from None
    serve(cfg)


if __name__ == "__main__":
    main()
