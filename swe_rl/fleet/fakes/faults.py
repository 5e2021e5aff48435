"""Real faults for a real local fleet: processes killed and restarted, links cut, slowed, containers killed.

`ChaosFleet` starts exec servers and a pool server on loopback (as `swe_rl.fleet.local.LocalFleet` does)
but keeps what it takes to kill any of them with SIGKILL and start it again on the same port, with the
same server id (an exec server finds its containers alive) or the same lease database (the pool). Each
exec server sits behind a `FaultProxy`, a TCP proxy on loopback the pool talks to: `cut()` drops every
open connection and refuses new ones until `heal()`; `delay` holds every chunk from the node that long
(a slow node). No traffic leaves this machine. `kill_container` is ``docker kill``.

Used by the chaos tests (``tests/fleet/test_chaos.py``) and ``bench/chaos_bench.py`` (docs/fleet.md,
"Faults"). Everything it starts is stopped, and every container its exec servers labelled is removed,
when the context exits, whatever happened.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from swe_rl.fleet.fakes.private_dockerd import PrivateDockerd
from swe_rl.fleet.local import (
    EXEC_SERVER_ARGS,
    POOL_SERVER_ARGS,
    die_with_parent,
    free_port,
    wait_healthy,
)
from swe_rl.fleet.protocol import LABEL_MANAGED, LABEL_SERVER, MANAGED_VALUE

__all__ = ["ChaosFleet", "FaultProxy", "KillingClient", "PrivateDockerd"]


class FaultProxy:
    """Forwards 127.0.0.1:<port> to a target port; can be cut, healed and slowed."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.delay = 0.0
        """Seconds every chunk of the node's answers is held (a slow node)."""
        self._cut = False
        self._closing = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept_loop, daemon=True, name=f"fault-proxy-{self.port}").start()

    def cut(self) -> None:
        """Drop every open connection (calls in flight lose their answers) and refuse new ones."""
        with self._lock:
            self._cut = True
            doomed, self._open = self._open, set()
        for s in doomed:
            _close(s)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closing = True
        self.cut()
        _close(self._listener)

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                _close(conn)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(conn)
                continue
            upstream.settimeout(None)  # an exec may answer after minutes of silence
            with self._lock:
                self._open.update((conn, upstream))
            threading.Thread(target=self._pipe, args=(conn, upstream, 0.0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, conn, None), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delay: float | None) -> None:
        """Copy src -> dst; `delay` None: the proxy's current delay (the node's direction)."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                wait = self.delay if delay is None else delay
                if wait:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


class ChaosFleet:
    """`exec_servers` exec servers behind fault proxies and one pool; each can be SIGKILLed and restarted."""

    def __init__(
        self,
        exec_servers: int = 2,
        *,
        exec_env: dict[str, str] | None = None,
        pool_env: dict[str, str] | None = None,
        node_env: list[dict[str, str]] | None = None,
        server_prefix: str = "chaos",
    ) -> None:
        self.count = exec_servers
        self.exec_env = exec_env or {}
        self.pool_env = pool_env or {}
        self.node_env = node_env or [{} for _ in range(exec_servers)]
        """Per-node extra environment (e.g. ``DOCKER_HOST`` of a private daemon)."""
        self.token = secrets.token_hex(24)
        """The pool's client token."""
        self.exec_token = secrets.token_hex(24)
        """The exec servers' token (the pool's alone)."""
        self.operator_token = secrets.token_hex(24)
        """The pool's operator token (`/status` lists the leases to it only)."""
        run = secrets.token_hex(3)
        self.server_ids = [f"{server_prefix}-{run}-{i}" for i in range(exec_servers)]
        self.pool_id = f"{server_prefix}-pool-{run}"
        self._tmp = tempfile.TemporaryDirectory(prefix="swe-rl-chaos-")
        self.log_dir = Path(self._tmp.name)
        self.exec_ports = [free_port() for _ in range(exec_servers)]
        self.proxies: list[FaultProxy] = []
        self.execs: list[subprocess.Popen | None] = [None] * exec_servers
        self.pool: subprocess.Popen | None = None
        self.pool_port = free_port()
        self.pool_url = f"http://127.0.0.1:{self.pool_port}"

    # ---- life cycle

    def __enter__(self) -> ChaosFleet:
        try:
            for i in range(self.count):
                self.start_exec(i)
                self.proxies.append(FaultProxy(self.exec_ports[i]))
            self.start_pool()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def client_env(self) -> dict[str, str]:
        return {"SWE_POOL_URL": self.pool_url, "SWE_POOL_TOKEN": self.token}

    def _spawn(self, args: list[str], env: dict[str, str], log_name: str) -> subprocess.Popen:
        with open(self.log_dir / log_name, "ab") as log:
            return subprocess.Popen(
                [sys.executable, *args],
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def start_exec(self, i: int) -> None:
        env = {
            "SWE_EXEC_TOKEN": self.exec_token,
            "SWE_EXEC_SERVER_ID": self.server_ids[i],
            "SWE_EXEC_HOST": "127.0.0.1",
            "SWE_EXEC_PORT": str(self.exec_ports[i]),
            **self.exec_env,
            **self.node_env[i],
        }
        proc = self._spawn(EXEC_SERVER_ARGS, env, f"exec-{i}.log")
        self.execs[i] = proc
        wait_healthy(f"http://127.0.0.1:{self.exec_ports[i]}", proc, log=self.log_dir / f"exec-{i}.log")

    def start_pool(self) -> None:
        env = {
            "SWE_POOL_EXEC_URLS": ",".join(p.url for p in self.proxies),
            "SWE_EXEC_TOKEN": self.exec_token,
            "SWE_POOL_TOKEN": self.token,
            "SWE_POOL_OPERATOR_TOKEN": self.operator_token,
            "SWE_POOL_HOST": "127.0.0.1",
            "SWE_POOL_PORT": str(self.pool_port),
            "SWE_POOL_ID": self.pool_id,
            "SWE_POOL_DB": str(self.log_dir / "leases.db"),
            "SWE_POOL_WARM_MIN": "0",
            **self.pool_env,
        }
        self.pool = self._spawn(POOL_SERVER_ARGS, env, "pool.log")
        wait_healthy(self.pool_url, self.pool, log=self.log_dir / "pool.log")

    def kill_exec(self, i: int) -> None:
        """SIGKILL exec server `i`: nothing of its shutdown runs, its containers stay alive."""
        _kill(self.execs[i])

    def kill_pool(self) -> None:
        """SIGKILL the pool server: nothing of its shutdown runs (its lease database stays)."""
        _kill(self.pool)

    def stop(self) -> None:
        """Pool first (its graceful shutdown releases every lease), exec servers, proxies, then a sweep."""
        for proc in [self.pool, *reversed(self.execs)]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        for proxy in self.proxies:
            proxy.close()
        self.remove_containers()
        self._tmp.cleanup()

    # ---- what the nodes hold

    def containers(self, docker_client: Any) -> list[Any]:
        """Every container one of this fleet's exec servers labelled (running or not)."""
        return [
            c
            for c in docker_client.containers.list(
                all=True, filters={"label": f"{LABEL_MANAGED}={MANAGED_VALUE}"}, ignore_removed=True
            )
            if (c.labels or {}).get(LABEL_SERVER) in self.server_ids
        ]

    def remove_containers(self) -> int:
        try:
            import docker
        except ImportError:
            return 0
        client = docker.from_env()
        removed = 0
        try:
            for c in self.containers(client):
                try:
                    c.remove(force=True)
                    removed += 1
                except docker.errors.APIError:
                    pass
        finally:
            client.close()
        return removed


def _kill(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(30)


HELD_MARK, HELD_GO = "/tmp/.chaos-started", "/tmp/.chaos-go"
HOLD = f"touch {HELD_MARK}; while [ ! -e {HELD_GO} ]; do sleep 0.05; done\n"
"""Prefixed to the held command: the command is then running (for the kill) and goes no further."""


class _HeldLease:
    """A grading lease whose `method` call (`exec`: the canonical-patch script; `evaluate`: the tests)
    holds at its start until the container is killed."""

    def __init__(self, lease: Any, method: str, held: asyncio.Event) -> None:
        self._lease, self._method, self._held = lease, method, held

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lease, name)

    async def exec(self, command: str, *args: Any, **kw: Any) -> Any:
        prerun = (
            command.endswith("/prerun.sh") or "/canon.sh <<'" in command
        )  # written, or the command itself
        if self._method == "exec" and ("write-tree" in command or prerun):
            # the canonical-patch script (alone, or in the pipeline's pre-run call: grading.prerun)
            self._held.set()
            command = HOLD + command
        return await self._lease.exec(command, *args, **kw)

    async def evaluate(self, patch: str, eval_script: str, timeout: float | None = None) -> Any:
        if self._method == "evaluate":
            self._held.set()
            eval_script = eval_script.replace("\n", "\n" + HOLD, 1)  # after the shebang line
        return await self._lease.evaluate(patch, eval_script, timeout)


class KillingClient:
    """The fleet client, but the grading lease's container is killed while `method` runs in it."""

    def __init__(self, client: Any, docker_client: Any, method: str) -> None:
        self.client, self.docker, self.method = client, docker_client, method
        self.killed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    @asynccontextmanager
    async def lease(self, *args: Any, **kw: Any):
        async with self.client.lease(*args, **kw) as lease:
            held = asyncio.Event()
            killer = asyncio.create_task(self._kill_when_held(lease.container_id, held))
            try:
                yield _HeldLease(lease, self.method, held)
            finally:
                killer.cancel()
                await asyncio.gather(killer, return_exceptions=True)

    async def _kill_when_held(self, container_id: str, held: asyncio.Event) -> None:
        await held.wait()
        container = await asyncio.to_thread(self.docker.containers.get, container_id)
        for _ in range(6000):  # the mark appears within a moment; the bound only stops a broken test
            probe = await asyncio.to_thread(container.exec_run, ["test", "-e", HELD_MARK])
            if probe.exit_code == 0:
                break
            await asyncio.sleep(0.05)
        self.killed.append(container_id)  # first: the grade may end (and cancel this task) at the kill
        await asyncio.to_thread(container.kill)
