"""A direct call over a kept-alive connection the node closed (`direct_client.py`), against a real HTTP
server on loopback: the call is sent once more on a fresh connection when no byte of the answer came,
and never when some did (it may have run: the exec server keeps no request ids to run it once).

The race is forced, not waited for: the server answers a connection's first request, then closes it the
moment the next request starts arriving, without reading it (as an HTTP/1.1 server closes an idle
connection under a request in flight). Issue 50 item 4: under a burst of 2,000 direct execs a reused
connection's reset failed a call (`ReadError`) that the pool's own wire would have sent again.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from types import SimpleNamespace
from typing import Any, cast

import pytest

from swe_rl.fleet.client import Lease
from swe_rl.fleet.client_config import EnvClientConfig
from swe_rl.fleet.direct_client import NodeNotReached, NodeWires, direct_call
from swe_rl.fleet.errors import FleetUnavailable
from swe_rl.fleet.retry import Retry

CREDENTIAL = "cred.abc"


def answer(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\nx-swe-node-seconds: 0.001\r\n\r\n".encode() + data
    )


class Node:
    """A raw HTTP/1.1 server on loopback. Each connection: its first request is answered in full; when the
    next one starts arriving, `on_second` decides: "close" (unread, no byte back), "partial" (read it,
    send part of an answer, close), "close_and_stop" (as "close", and nothing listens any more)."""

    def __init__(self, on_second: str) -> None:
        self.on_second = on_second
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")
        )
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._read_request(reader)
            writer.write(answer({"output": f"call {len(self.requests)}\n"}))
            await writer.drain()
            if self.on_second == "partial":
                await self._read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
                await writer.drain()
            else:
                await reader.read(1)  # the next request started: close under it, unread
                if self.on_second == "close_and_stop":
                    self.stop()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()


def lease_on(url: str) -> Lease:
    return cast(Lease, SimpleNamespace(node=url, container_id="c1", lease_id="lease-1"))


def config() -> EnvClientConfig:
    return EnvClientConfig(
        pool_url="http://127.0.0.1:9", token="t", retries=3, backoff=0.01, backoff_max=0.05
    )


async def call(wires: NodeWires, node: Node, retry: Retry = Retry.UNSENT) -> dict[str, Any]:
    return await direct_call(
        wires,
        config(),
        lease_on(node.url),
        "exec",
        {"command": "touch x"},
        CREDENTIAL,
        timeout=10,
        retry=retry,
    )


@pytest.fixture
async def wires():
    made = NodeWires(config())
    yield made
    made.close()


async def test_a_kept_alive_connection_closed_under_a_call_is_resent_on_a_fresh_one(wires):
    node = Node("close")
    await node.start()
    try:
        assert (await call(wires, node))["output"] == "call 1\n"
        # a call that changes the container (Retry.UNSENT: never retried by policy) still succeeds: the
        # node closed the kept connection without reading it, so it went once more, fresh
        assert (await call(wires, node))["output"] == "call 2\n"
    finally:
        node.stop()
    assert node.connections == 2
    assert len(node.requests) == 2  # the node read each call once
    assert all(f"Authorization: Lease {CREDENTIAL}".encode() in r for r in node.requests)
    assert all(b"Bearer" not in r for r in node.requests)  # no node or pool token on a direct call


async def test_a_break_after_bytes_of_the_answer_is_not_resent(wires):
    node = Node("partial")
    await node.start()
    try:
        await call(wires, node)
        with pytest.raises(FleetUnavailable, match="is down or cut the call"):
            await call(wires, node)
    finally:
        node.stop()
    assert len(node.requests) == 2 and node.connections == 1  # the second call was sent once, on the kept one


async def test_a_refused_fresh_connection_after_a_break_is_not_sent_through_the_pool(wires):
    """The kept connection broke and then nothing listens: the node may have died mid-call, so this is a
    FleetUnavailable, not NodeNotReached (the caller's way through the pool, which would send it again)."""
    node = Node("close_and_stop")
    await node.start()
    await call(wires, node)
    with pytest.raises(FleetUnavailable, match="may have run"):
        await call(wires, node)
    assert len(node.requests) == 1


async def test_a_node_refusing_the_first_connection_is_not_reached(wires):
    node = Node("close")
    await node.start()
    node.stop()
    await asyncio.sleep(0)
    with pytest.raises(NodeNotReached):
        await call(wires, node)


async def test_a_node_whose_certificate_the_client_refuses_is_not_reached(tmp_path):
    """A TLS handshake the client refuses (a node certified by a CA it does not hold) made no connection:
    nothing was sent, so the call may go through the pool (NodeNotReached), as a refused connection may."""
    from tests.fleet.tls_certs import TestCA

    stranger = TestCA(tmp_path, name="stranger")
    issued = stranger.issue("node")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(issued.cert, issued.key)
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            requests.append(await reader.readuntil(b"\r\n\r\n"))
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    wires = NodeWires(config())  # the system's CAs: not the stranger's
    try:
        with pytest.raises(NodeNotReached, match="SSL|certificate"):
            await direct_call(
                wires,
                config(),
                lease_on(url),
                "exec",
                {"command": "true"},
                CREDENTIAL,
                timeout=10,
                retry=Retry.UNSENT,
            )
    finally:
        wires.close()
        server.close()
    assert requests == []


async def test_a_call_the_node_refused_unstarted_goes_through_the_pool(wires):
    """A node whose drain ended answers 503 `not_started` (exec/drain.py): nothing ran, so the call is
    NodeNotReached (the caller sends it through the pool, which waits for the restarted node)."""
    requests: list[bytes] = []
    refusal = json.dumps({"error": "node stopping", "draining": True, "not_started": True}).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            requests.append(await reader.readuntil(b"\r\n\r\n"))
            head = f"HTTP/1.1 503 Service Unavailable\r\nContent-Length: {len(refusal)}\r\n\r\n"
            writer.write(head.encode() + refusal)
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    node = SimpleNamespace(url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        with pytest.raises(NodeNotReached, match="refused the call unstarted"):
            await call(wires, cast(Node, node), Retry.SAFE)  # not retried on the node either
        assert len(requests) == 1
    finally:
        server.close()
