"""A simulated fleet for load tests: many in-memory exec servers in one process, and a pool server.

The exec servers are the real exec server app (`swe_rl.fleet.exec`: Flask on waitress, the
real ContainerManager, warm pools included) over the in-memory backend, chosen by name as on a
node (`SWE_EXEC_BACKEND=memory`, `swe_rl.fleet.exec.memory_backend`): no Docker, commands are not
run, latencies are configurable. They share one helper process and one WSGI server (a port, an app
and a manager per node) so that hundreds of them cost little memory and CPU; the pool server is a
separate process, as in production. Loopback only; everything stops when the context exits, and the
logs (pool.log, exec-nodes.log) are deleted then, unless the body raised (a failed test) or a process
died or exited uncleanly: then they are kept and their tail is printed to stderr, so a CI log explains
the failure.

    with MemoryFleet(nodes=20, max_per_node=120) as fleet:
        client = EnvClient(EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token))

Run as `python -m swe_rl.fleet.fakes.simulated_fleet` it serves only the exec servers and prints one JSON line with
their URLs once every one of them listens; SIGTERM stops them.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_rl.fleet.fakes.inline_loop import InlineDispatcher
from swe_rl.fleet.fakes.inline_loop import run as run_inline
from swe_rl.fleet.local import POOL_SERVER_ARGS, free_port, killed_with_parent, wait_healthy


def serve_nodes(
    n: int,
    token: str,
    max_containers: int,
    latency_ms: str,
    threads: int,
    state_dir: str,
    images: list[str],
    inline: bool = False,
) -> tuple[list[tuple[str, str, Any]], Any]:
    """Start n memory-backed exec servers on 127.0.0.1: (url, server_id, manager) each, and the WSGI server.

    Each node is its own app and manager on its own port, but the nodes share one waitress server: one
    event loop listening on every node's port, one pool of `threads` workers per node, a request going to
    the app of the port it came in on. A server per node meant hundreds of event loops and thousands of
    threads contending for one GIL: under a burst the helper spent 2.2 ms of CPU per request at 200 nodes
    against 1.1 ms now, both at Python's default switch interval (docs/fleet.md, "Load tests"), and
    starved the pool it was meant to measure.

    `inline`: no worker threads; each request is served on the loop's own thread by a loop over one epoll
    (`inline_loop.py`), for instant commands only (no latency): what a process packing many nodes costs
    per call then no longer grows with the connections it holds (docs/fleet.md, "The bench").
    """
    import socket

    import waitress.server

    from swe_rl.fleet.exec.app import create_app
    from swe_rl.fleet.exec.arrival import stamp_arrivals
    from swe_rl.fleet.exec.backend import open_backend
    from swe_rl.fleet.exec.config import ExecConfig
    from swe_rl.fleet.exec.manager import ContainerManager

    run_id = secrets.token_hex(3)
    env = {
        **os.environ,
        "SWE_EXEC_BACKEND": "memory",
        "SWE_EXEC_FAKE_LATENCY_MS": latency_ms,
        "SWE_EXEC_FAKE_IMAGES": ",".join(images),
    }
    nodes: list[tuple[str, str, Any]] = []
    apps: dict[str, Any] = {}
    sockets: list[socket.socket] = []
    for i in range(n):
        cfg = ExecConfig.from_env(env)
        cfg.host, cfg.port, cfg.token = "127.0.0.1", 0, token
        cfg.server_id, cfg.max_containers, cfg.threads = f"mem-{run_id}-{i}", max_containers, threads
        cfg.state_dir = state_dir
        manager = ContainerManager(cfg, open_backend(cfg, env))
        manager.start_background()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((cfg.host, 0))
        port = sock.getsockname()[1]
        apps[str(port)] = create_app(manager)
        sockets.append(sock)
        nodes.append((f"http://127.0.0.1:{port}", cfg.server_id, manager))

    def by_port(environ: dict[str, Any], start_response: Any) -> Any:
        return apps[environ["SERVER_PORT"]](environ, start_response)

    dispatcher = InlineDispatcher() if inline else None
    server = waitress.server.create_server(
        by_port,
        sockets=sockets,
        threads=threads * n,
        connection_limit=4096 * n,  # counted over the whole server, not per port
        ident="swe-exec-memory",
        asyncore_use_poll=True,  # select() stops at fd 1024
        _dispatcher=dispatcher,
    )
    stamp_arrivals(server)  # each node's time starts when it read the request, as a real node's does
    if dispatcher is not None:
        loop = threading.Thread(
            target=run_inline, args=(server, dispatcher, threading.Event()), name="exec-nodes"
        )
    else:
        loop = threading.Thread(target=server.run, name="exec-nodes")
    loop.daemon = True
    loop.start()
    return nodes, server


FREEZE_EVERY = 5.0
"""Seconds between two `gc.freeze()` of the helper (`_freeze_survivors`)."""


def _freeze_survivors(done: threading.Event) -> None:
    """Every `FREEZE_EVERY` seconds, move what survived so far out of the garbage collector's reach.

    Why: this one process holds the records of every simulated node's containers (20,000 in the scale
    bench), and Python's full collections scan them all: pauses of 100-340 ms that stopped all 200 nodes
    at once in the middle of timed calls and made the pool's overhead p99 (the node's queue counts in
    it). A real node's heap holds its own hundred containers. What is frozen is never collected: cycles
    made and dropped between two freezes leak, a bounded cost in a load-test helper."""
    while not done.wait(FREEZE_EVERY):
        gc.freeze()


def _raise_fd_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="in-memory exec servers for load tests (no Docker)")
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--max-containers", type=int, default=200)
    p.add_argument("--latency-ms", default="0", help="create,exec,destroy (or one number) in milliseconds")
    p.add_argument("--threads", type=int, default=8, help="WSGI threads per exec server")
    p.add_argument("--images", default="", help="comma-separated images the nodes have (empty: any)")
    p.add_argument("--state-dir", default="")
    p.add_argument("--inline", action="store_true", help="serve on the loop's thread (instant commands only)")
    a = p.parse_args(argv)
    if a.inline and any(float(x or 0) for x in a.latency_ms.split(",")):
        p.error("--inline serves instant commands only: it cannot take --latency-ms")
    logging.basicConfig(
        level=os.environ.get("SWE_LOG_LEVEL", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # 8 threads per node always queue under a burst: one WARNING per queued request would bury, in the tail
    # a failed test prints, the lines that explain the failure.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    logging.getLogger("swe_exec_server").warning(
        "MEMORY BACKEND: %d simulated exec servers, no containers, commands are not run (load tests only)",
        a.nodes,
    )
    _raise_fd_limit()
    # Python's default switch interval (5 ms) stays: a shorter one (0.2 ms was tried) saves ~0.2 ms on a
    # lone request but makes hundreds of threads hand the GIL round under a burst (10-25x the CPU per
    # request at 100 in flight).
    import faulthandler

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack to the log
    token = os.environ.get("SWE_EXEC_TOKEN", "")
    if not token:
        raise SystemExit("error: set SWE_EXEC_TOKEN")
    state_dir = a.state_dir or tempfile.mkdtemp(prefix="swe-rl-memory-state-")
    images = [i for i in a.images.split(",") if i]
    nodes, server = serve_nodes(
        a.nodes, token, a.max_containers, a.latency_ms, a.threads, state_dir, images, inline=a.inline
    )
    print(
        json.dumps(
            {"urls": [u for u, *_ in nodes], "server_ids": [s for _, s, *_ in nodes], "pid": os.getpid()}
        ),
        flush=True,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    threading.Thread(target=_freeze_survivors, args=(done,), name="gc-freeze", daemon=True).start()
    done.wait()
    for _, _, manager in nodes:
        manager.stop()
    server.close()
    if not a.state_dir:  # ours: a temporary directory no one else reads
        shutil.rmtree(state_dir, ignore_errors=True)


TAIL_LINES = 80
"""Lines of each log printed when a fleet's logs are kept after a failure."""


@dataclass
class MemoryFleet:
    """`nodes` in-memory exec servers (in `node_processes` helper processes) and a pool server process,
    on loopback."""

    nodes: int = 20
    max_per_node: int = 100
    latency_ms: str = "0"
    threads: int = 8
    node_processes: int = 1
    """Helper processes the nodes are split over. Why more than one at scale: each helper's waitress loop
    polls every socket it holds on each turn (the nodes' listeners and every connection to them), so its
    CPU per request grows with the nodes it serves; 200 nodes in one helper cost ~7 ms of CPU per exec,
    and what the pool's overhead measured was that helper's queue (docs/fleet.md, round six)."""
    inline: bool = False
    """Serve each helper's requests on its loop's thread (`serve_nodes`); instant commands only."""
    images: list[str] = field(default_factory=list)
    pool_env: dict[str, str] = field(default_factory=dict)
    exec_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    python: str = sys.executable

    token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    """The pool's client token."""
    exec_token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    """The exec servers' token (the pool's alone, never a client's)."""
    operator_token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    """The pool's operator token (`/status` lists the leases to it only)."""
    pool_url: str = ""
    exec_urls: list[str] = field(default_factory=list)
    helper: subprocess.Popen | None = None
    """The first helper process (the only one by default)."""
    more_helpers: list[subprocess.Popen] = field(default_factory=list)
    pool: subprocess.Popen | None = None
    replicas: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    """More pool processes (`start_replica`: with `SWE_POOL_DATABASE_URL` in `pool_env`, replicas sharing one
    lease record), as (URL, process)."""
    _own_dir: Path | None = field(default=None, repr=False)
    """The temporary log directory this fleet made (removed by `stop` unless something failed)."""
    _pool_env: dict[str, str] = field(default_factory=dict, repr=False)

    def __enter__(self) -> MemoryFleet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.stop(failed=exc_type is not None)

    def start(self) -> None:
        if self.log_dir is None:
            # mkdtemp, not TemporaryDirectory: that one deletes itself when collected, kept logs included
            self._own_dir = self.log_dir = Path(tempfile.mkdtemp(prefix="swe-rl-memory-fleet-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SWE_EXEC_TOKEN": self.exec_token, **self.exec_env}
        parts = max(1, min(self.node_processes, self.nodes))
        shares = [self.nodes // parts + (1 if i < self.nodes % parts else 0) for i in range(parts)]
        started = []
        for i, share in enumerate(shares):
            started.append(self._start_helper(env, share, f"exec-state-{i}" if i else "exec-state"))
            if i == 0:
                self.helper = started[0]
            else:
                self.more_helpers.append(started[-1])
        self.exec_urls = []
        for helper in started:
            assert helper.stdout is not None
            line = helper.stdout.readline()
            if not line:
                raise RuntimeError(
                    f"memory exec servers did not start; see {self.log_dir / 'exec-nodes.log'}"
                )
            self.exec_urls += json.loads(line)["urls"]
        port = free_port()
        self._pool_env = {
            **os.environ,
            "SWE_POOL_EXEC_URLS": ",".join(self.exec_urls),
            "SWE_EXEC_TOKEN": self.exec_token,
            "SWE_POOL_TOKEN": self.token,
            "SWE_POOL_OPERATOR_TOKEN": self.operator_token,
            "SWE_POOL_HOST": "127.0.0.1",
            "SWE_POOL_PORT": str(port),
            "SWE_POOL_ID": f"memory-pool-{secrets.token_hex(3)}",
            "SWE_POOL_DB": str(self.log_dir / "leases.db"),
            "SWE_POOL_SIGNING_KEY_FILE": str(self.log_dir / "lease-signing.key"),  # one key for every replica
            "SWE_POOL_MAX_PER_NODE": str(self.max_per_node),
            "SWE_LOG_LEVEL": "WARNING",
            **self.pool_env,
        }
        self.pool_url = f"http://127.0.0.1:{port}"
        self.start_pool()

    @property
    def helpers(self) -> list[subprocess.Popen]:
        """Every helper process serving nodes."""
        return [h for h in [self.helper, *self.more_helpers] if h is not None]

    def _start_helper(self, env: dict[str, str], nodes: int, state: str) -> subprocess.Popen:
        assert self.log_dir is not None
        return subprocess.Popen(
            [
                self.python,
                "-m",
                "swe_rl.fleet.fakes.simulated_fleet",
                "--nodes",
                str(nodes),
                "--max-containers",
                str(self.max_per_node * 2),
                "--latency-ms",
                self.latency_ms,
                "--threads",
                str(self.threads),
                "--images",
                ",".join(self.images),
                "--state-dir",
                str(self.log_dir / state),
                *(["--inline"] if self.inline else []),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(self.log_dir / "exec-nodes.log", "ab"),
            start_new_session=True,
            preexec_fn=killed_with_parent,
            text=True,
        )

    def start_pool(self, *, wait: bool = True) -> float:
        """Start the pool server (again: same port, owner id and lease store); seconds until it is ready
        (every node checked: /healthz answers 200), or 0 at once with `wait=False`.

        Call it from a thread that outlives the pool (the main thread, not `asyncio.to_thread`): the pool
        gets SIGKILL when the thread that started it ends (`killed_with_parent`: PR_SET_PDEATHSIG)."""
        assert self.log_dir is not None
        t0 = time.monotonic()
        with open(self.log_dir / "pool.log", "ab") as log:
            self.pool = subprocess.Popen(
                [self.python, *POOL_SERVER_ARGS],
                env=self._pool_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=killed_with_parent,
            )
        if wait:
            wait_healthy(self.pool_url, self.pool, poll=0.02)
        return time.monotonic() - t0 if wait else 0.0

    def start_replica(self) -> str:
        """Start one more pool process over the same nodes, with the same settings on its own port (give
        `pool_env` a `SWE_POOL_DATABASE_URL`: replicas share the lease record); its URL once it is ready.
        Call it from the main thread (see `start_pool`)."""
        assert self.log_dir is not None
        port = free_port()
        env = {**self._pool_env, "SWE_POOL_PORT": str(port)}
        url = f"http://127.0.0.1:{port}"
        with open(self.log_dir / f"pool-{port}.log", "ab") as log:
            proc = subprocess.Popen(
                [self.python, *POOL_SERVER_ARGS],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=killed_with_parent,
            )
        self.replicas.append((url, proc))
        wait_healthy(url, proc, poll=0.02)
        return url

    def kill_replica(self, url: str) -> None:
        """SIGKILL the replica at `url` (a crash: nothing of its shutdown runs) and forget it."""
        for entry in list(self.replicas):
            if entry[0] == url:
                entry[1].kill()
                entry[1].wait(60)
                self.replicas.remove(entry)

    def kill_pool(self, sig: int = signal.SIGKILL) -> None:
        """Stop the pool server: SIGKILL (default) as a crash would, nothing of its shutdown runs;
        SIGTERM for a graceful stop (it releases every lease)."""
        if self.pool is not None and self.pool.poll() is None:
            self.pool.send_signal(sig)
            self.pool.wait(120)

    def stop(self, *, failed: bool = False) -> None:
        """Stop both processes; the logs go too, unless something failed (then they stay, tail printed).

        Something failed when the caller says so (the `with` body raised: a failed test), or when the pool or
        the exec servers died before being told to stop or did not exit cleanly when told.
        """
        problems = ["the code using the fleet raised"] if failed else []
        pools = [("pool server", self.pool), *(("pool replica", proc) for _, proc in self.replicas)]
        for name, proc in (*pools, *(("exec servers", h) for h in self.helpers)):
            if proc is None:
                continue
            if proc.poll() is not None:
                problems.append(f"the {name} exited on its own with code {proc.returncode}")
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(10)
                problems.append(f"the {name} did not stop within 60 s of SIGTERM")
            if code not in (0, -signal.SIGTERM):  # uvicorn re-raises SIGTERM after a clean shutdown
                problems.append(f"the {name} exited with code {code} when told to stop")
        for helper in self.helpers:
            if helper.stdout is not None:
                helper.stdout.close()
        if problems:
            self.report(problems)
        elif self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
        self._own_dir = None

    def report(self, problems: list[str], lines: int = TAIL_LINES) -> None:
        """Print why the logs are kept, where, and the tail of each (to stderr: a CI log shows it)."""
        out = [f"simulated fleet: logs kept in {self.log_dir} because " + "; ".join(problems)]
        for name in ("pool.log", "exec-nodes.log"):
            path = (self.log_dir or Path(".")) / name
            try:
                text = path.read_text(errors="replace").splitlines()
            except OSError as exc:
                out.append(f"--- {path}: unreadable ({exc})")
                continue
            out.append(f"--- last {min(lines, len(text))} of {len(text)} lines of {path}")
            out.extend(text[-lines:])
        print("\n".join(out), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
