"""A restarted pool serves its recovered leases while a node is still being checked.

Real pool subprocess over two simulated exec servers (the in-memory backend, real HTTP on loopback) and
a third node that answers /healthz and /images at once but holds /status (the reconciliation's list)
until the test lets it go. After a SIGKILL and a restart the pool must: answer at once (503
"starting" on /healthz), route calls and heartbeats of leases on the checked nodes, hold an allocate
until every node is checked, and be ready (200) once the held node answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from pool_fixtures import wait_for as pooled_wait_for

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

pytestmark = pytest.mark.docker  # starts a fleet (no daemon needed): the fleet tier

LEASES = 20


class HeldNode:
    """An exec server stand-in whose /status answers only once `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.status_asked = threading.Event()
        held = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self.answer({"ok": True, "capacity": 0})
                elif self.path == "/images":
                    self.answer({"images": [], "count": 0})
                elif self.path == "/status":
                    held.status_asked.set()
                    held.release.wait(120)
                    self.answer({"containers": []})
                else:
                    self.answer({"error": "not here"}, 404)

            def do_POST(self) -> None:
                self.answer({"error": "this node takes no work"}, 503)

            def answer(self, data: dict, status: int = 200) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the pool gave up or died
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def held_node() -> Iterator[HeldNode]:
    node = HeldNode()
    try:
        yield node
    finally:
        node.close()


def healthz(fleet: MemoryFleet) -> httpx.Response | None:
    try:
        return httpx.get(fleet.pool_url + "/healthz", timeout=10)
    except httpx.HTTPError:
        return None


def wait_for(check, what: str, timeout: float = 60.0):
    return pooled_wait_for(check, what, timeout)


def test_restarted_pool_serves_leases_while_a_node_is_still_checked(held_node):
    with MemoryFleet(
        nodes=2,
        max_per_node=40,
        pool_env={"SWE_POOL_WARM_MIN": "0", "SWE_POOL_LEASE_TTL": "600"},
        exec_env={"SWE_EXEC_WARM_BURST_WINDOW": "0"},
    ) as fleet:
        config = EnvClientConfig(
            pool_url=fleet.pool_url,
            token=fleet.token,
            heartbeat_interval=0.5,
            backoff=0.1,
            read_timeout=120,
            restart_grace=60,
        )

        async def run() -> None:
            async with EnvClient(config) as client:
                leases = await asyncio.gather(
                    *(client.allocate("img:e", instance_id=f"e-{i}") for i in range(LEASES))
                )
                for lease in leases:
                    lease.start_heartbeat()

                # the pool dies; the next one also has a node whose reconciliation hangs
                fleet.kill_pool(signal.SIGKILL)
                fleet._pool_env["SWE_POOL_EXEC_URLS"] += "," + held_node.url
                fleet.start_pool(wait=False)
                starting = await wait_for(lambda: healthz(fleet), "the restarted pool to answer")
                await asyncio.to_thread(held_node.status_asked.wait, 60)
                assert starting.status_code == 503 and starting.json()["starting"] is True
                assert starting.json()["leases"] == LEASES  # every lease loaded before the first answer

                # leases on the checked nodes are served while the held node is not checked yet
                results = await asyncio.gather(*(lease.exec(f"echo {i}") for i, lease in enumerate(leases)))
                assert [r.output for r in results] == [f"{i}\n" for i in range(LEASES)]
                assert await client.heartbeat_all() == LEASES
                assert all(lease.lost is None for lease in leases)
                still = await asyncio.to_thread(healthz, fleet)
                assert still is not None and still.status_code == 503  # the held node is still unchecked
                assert still.json()["nodes_checked"] == 2

                # an allocate waits for the whole fleet: it is placed once the held node is checked
                allocating = asyncio.create_task(client.allocate("img:e", instance_id="after"))
                await asyncio.sleep(0.5)
                assert not allocating.done()
                held_node.release.set()
                extra = await asyncio.wait_for(allocating, 60)
                assert extra.node in fleet.exec_urls  # the held node refuses work (503): placed elsewhere
                ready = await wait_for(
                    lambda: (r := healthz(fleet)) is not None and r.status_code == 200 and r.json(),
                    "the pool to be ready",
                )
                assert ready["ok"] is True and ready["nodes_total"] == 3 and ready["leases"] == LEASES + 1

                await asyncio.gather(*(lease.close() for lease in [*leases, extra]))
                assert (await client.status())["totals"]["leases"] == 0

        asyncio.run(run())
