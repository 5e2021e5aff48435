"""A routed call on a draining node is sent again to the restarted node only when it provably never
started (pool/routing.py `forward`, exec/drain.py); against real HTTP servers on loopback (fast tier).

Issue 50's edge: the node read the call on a kept-alive connection, died in it at the end of its drain
(its bound passed), and the pool's once-more on a fresh connection was refused. That refusal was taken
for "a draining node refused the connection: nothing was sent", and the call went again to the
restarted node: a non-idempotent command ran twice. Now it is a 503 `may_have_run`; a call is sent again
only when the node refused it unstarted (its 503 `not_started`, given once its drain is over) or the
call's first connection was refused (nothing was written).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from swe_rl.fleet.pool.nodes import Node, NodeSet
from swe_rl.fleet.pool.routing import NodeCalls, forward
from swe_rl.fleet.pool.store import LeaseRecord
from swe_rl.fleet.protocol import ApiError

BOUND = 60.0  # only a hang reaches it
COMMAND = "echo once >> /work/log"  # not idempotent: twice would be seen


def answer(status: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data


class FakeNode:
    """A raw HTTP/1.1 node on loopback; `script(n, request)` answers its n-th request (bytes), or None:
    the node dies there (`stop`: that connection closed unanswered, the others too, nothing listens)."""

    def __init__(self, script: Callable[[int, bytes], bytes | None], port: int = 0) -> None:
        self.script, self.port = script, port
        self.requests: list[bytes] = []
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(x.split(b":")[1])
                    for x in head.split(b"\r\n")
                    if x.lower().startswith(b"content-length")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                reply = self.script(len(self.requests), request)
                if reply is None:
                    self.stop()
                    break
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        """The process is gone: nothing listens, and every connection it had is closed."""
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.close()


def lease_on(url: str) -> LeaseRecord:
    return LeaseRecord("lease-1", None, url, "c1", "img", None, "/work", time.time())


async def route(calls: NodeCalls, node: Node) -> Any:
    return await forward(
        calls, node, lease_on(node.url), "exec", {"command": COMMAND}, call_margin=5, on_lost=lambda *a: None
    )


def calls_to(url: str) -> tuple[NodeCalls, Node]:
    nodes = NodeSet([url], down_after=3)
    node = nodes.get(url)
    node.healthy = True
    node.checked.set()
    calls = NodeCalls([url], nodes, "tok", connect_timeout=5, shards=1)
    calls.open()
    return calls, node


async def back(node: Node, restarted: FakeNode) -> None:
    """The restarted node listens again, and its health check says so (as the pool's checks would)."""
    await restarted.start()
    node.healthy, node.draining = True, False


async def test_a_call_cut_by_a_node_dying_at_its_drains_end_is_not_sent_again():
    ok = answer("200 OK", {"returncode": 0, "output": "once\n"})
    calls: NodeCalls | None = None
    node: Node | None = None

    def script(n: int, request: bytes) -> bytes | None:
        if n == 1:
            return ok
        assert node is not None
        node.draining = True  # the health check saw the drain while this call ran ...
        return None  # ... and the node read the call and died in it (killed at its drain's end)

    first = FakeNode(script)
    await first.start()
    calls, node = calls_to(f"http://127.0.0.1:{first.port}")
    restarted = FakeNode(lambda n, req: ok, port=first.port)
    try:
        await route(calls, node)  # the call before: its connection is kept alive, and reused below
        comeback = asyncio.get_running_loop().call_later(
            0.5, lambda: asyncio.ensure_future(back(node, restarted))
        )
        with pytest.raises(ApiError) as err:
            await asyncio.wait_for(route(calls, node), BOUND)
        assert err.value.status == 503 and err.value.extra.get("may_have_run") is True, err.value.extra
        await asyncio.sleep(1.5)  # the restarted node is up (at 0.5 s): nothing is sent to it
        comeback.cancel()
        assert len(first.requests) == 2 and restarted.requests == []
    finally:
        first.stop()
        restarted.stop()
        await calls.aclose()


async def test_a_call_the_node_refused_unstarted_runs_once_on_the_restarted_node():
    unstarted = answer(
        "503 Service Unavailable", {"error": "node stopping", "draining": True, "not_started": True}
    )
    closing = FakeNode(lambda n, req: unstarted)
    await closing.start()
    url = f"http://127.0.0.1:{closing.port}"
    calls, node = calls_to(url)
    restarted = FakeNode(
        lambda n, req: answer("200 OK", {"returncode": 0, "output": "once\n"}), port=closing.port
    )

    async def restart_later() -> None:
        while not closing.requests:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert node.draining  # the pool took the node's word: it waits for the restart
        closing.stop()
        await back(node, restarted)

    try:
        restarting = asyncio.ensure_future(restart_later())
        resp = await asyncio.wait_for(route(calls, node), BOUND)
        await restarting
        assert resp.status_code == 200 and json.loads(resp.body)["output"] == "once\n"
        assert len(closing.requests) == 1 and len(restarted.requests) == 1  # ran once: on the restarted node
    finally:
        closing.stop()
        restarted.stop()
        await calls.aclose()


async def test_a_first_connection_refused_by_a_draining_node_waits_for_its_restart():
    """Nothing was written (the call's own connection was refused): the call goes to the restarted node."""
    gone = FakeNode(lambda n, req: None)
    await gone.start()
    gone.stop()  # nothing listens: a node between its exit and its restart
    url = f"http://127.0.0.1:{gone.port}"
    calls, node = calls_to(url)
    node.draining = True
    restarted = FakeNode(
        lambda n, req: answer("200 OK", {"returncode": 0, "output": "once\n"}), port=gone.port
    )
    try:
        node.draining = False  # the call is sent at once (the pool has not seen the drain end yet) ...
        sending = asyncio.ensure_future(route(calls, node))
        await asyncio.sleep(0)
        node.draining = True  # ... and the refusal comes from a node said to be draining
        await asyncio.sleep(0.5)
        await back(node, restarted)
        resp = await asyncio.wait_for(sending, BOUND)
        assert resp.status_code == 200 and len(restarted.requests) == 1
    finally:
        restarted.stop()
        await calls.aclose()
