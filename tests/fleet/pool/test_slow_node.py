"""A node down only because its health checks time out still serves its leases' calls.

Seen in CI under load: a starved node's /healthz timed out twice, the pool marked it down and every
call of its leases failed at once with 503 (a lost trajectory), although the node answered calls. Real
pool subprocess over a simulated exec server (in-memory backend, real HTTP on loopback) reached
through a proxy that can hold /healthz past the pool's health timeout or stop answering at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.errors import FleetUnavailable
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

pytestmark = pytest.mark.docker  # starts a fleet (no daemon needed): the fleet tier


class Proxy:
    """Forwards every request to `target`; /healthz waits `health_delay` seconds first."""

    def __init__(self, target: str) -> None:
        self.health_delay = 0.0
        self.dead = False
        """Hang up on every request without an answer (a node that died: the connection is cut)."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/healthz" and proxy.health_delay:
                    time.sleep(proxy.health_delay)
                self.forward("GET", b"")

            def do_POST(self) -> None:
                self.forward("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def forward(self, method: str, body: bytes) -> None:
                if proxy.dead:
                    self.close_connection = True
                    return
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")
                }
                r = httpx.request(method, target + self.path, content=body, headers=headers, timeout=120)
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(r.content)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def node_of(pool_url: str, token: str, url: str) -> dict:
    status = httpx.get(pool_url + "/status", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
    return next(n for n in status["nodes"] if n["url"] == url)


def test_a_node_whose_health_checks_time_out_still_serves_its_leases():
    with MemoryFleet(
        nodes=1,
        pool_env={
            "SWE_POOL_WARM_MIN": "0",
            "SWE_POOL_HEALTH_INTERVAL": "0.5",
            "SWE_POOL_NODE_DOWN_AFTER": "2",
        },
        exec_env={"SWE_EXEC_WARM_BURST_WINDOW": "0"},
    ) as fleet:
        proxy = Proxy(fleet.exec_urls[0])
        try:
            fleet.kill_pool(signal.SIGKILL)  # the pool sees the node only through the proxy
            fleet._pool_env["SWE_POOL_EXEC_URLS"] = proxy.url
            fleet.start_pool()

            async def run() -> None:
                config = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, backoff=0.1, retries=1)
                async with EnvClient(config) as client:
                    lease = await client.allocate("img:slow", instance_id="slow-0")
                    assert (await lease.exec("echo before")).output == "before\n"

                    proxy.health_delay = 3.0  # past the pool's 1 s health timeout, twice: marked down
                    await asyncio.to_thread(
                        _wait, lambda: not node_of(fleet.pool_url, fleet.token, proxy.url)["healthy"]
                    )
                    node = node_of(fleet.pool_url, fleet.token, proxy.url)
                    assert "Timeout" in node["last_error"], node
                    assert (await lease.exec("echo slow")).output == "slow\n"  # tried, and answered

                    proxy.dead = True  # now it cuts every connection: the call fails at once, node down
                    started = time.monotonic()
                    with pytest.raises(FleetUnavailable, match="down"):
                        await lease.exec("echo gone", timeout=60)
                    assert time.monotonic() - started < 30  # not after the command's 60 s

            asyncio.run(run())
        finally:
            proxy.close()


def _wait(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the pool did not mark the node down"
        time.sleep(0.2)
