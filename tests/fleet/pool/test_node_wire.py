"""The lean client of routed calls (node_wire.py) against a real socket server on loopback that answers
scripted bytes: each framing, connection reuse, and every failure mapped to the error routing expects."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from swe_rl.fleet.pool.node_wire import (
    NodeWire,
    WireConnectTimeout,
    WireError,
    WireTimeout,
)
from swe_rl.fleet.pool.nodes import NodeSet
from swe_rl.fleet.pool.routing import NodeCalls
from swe_rl.fleet.protocol import ApiError

Script = Callable[[bytes], bytes | None]
"""The raw answer to one raw request (head and body); None: close the connection without answering."""


def ok(body: dict[str, Any], extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n{extra}\r\n".encode() + data


class Server:
    """Answers each request on a connection by `script`; records requests and connections."""

    def __init__(self, script: Script) -> None:
        self.script, self.requests, self.connections = script, [], 0
        self.close_after = False  # close each connection after its first answer
        self.server: asyncio.base_events.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.script(request)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Script], Any]]:
    servers: list[Server] = []

    async def start(script: Script) -> Server:
        server = Server(script)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


def wire_to(url: str, **kw: Any) -> NodeWire:
    return NodeWire(url, "tok", ssl_context=None, connect_timeout=kw.pop("connect_timeout", 5), **kw)


async def test_a_call_sends_one_post_with_the_token_and_reuses_its_connection(serve):
    server = await serve(lambda req: ok({"output": "ok\n"}))
    wire = wire_to(server.url + "/")
    try:
        for _ in range(3):
            answer = await wire.post("/container/exec", {"command": "echo é"}, 5)
            assert answer.status_code == 200 and answer.json() == {"output": "ok\n"}
    finally:
        wire.close()
    assert server.connections == 1  # kept alive
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /container/exec HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer tok" in head
    assert json.loads(body) == {"command": "echo é"}


async def test_chunked_close_delimited_and_error_answers_are_read(serve):
    answers = iter(
        [
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nT: 1\r\n\r\n',
            ok({"error": "unknown container x"}).replace(b"200 OK", b"404 NOT FOUND"),
            b'HTTP/1.0 200 OK\r\n\r\n{"b": 2}',
        ]
    )
    server = await serve(lambda req: next(answers))
    wire = wire_to(server.url)
    try:
        assert (await wire.post("/x", {}, 5)).json() == {"a": 1}
        missing = await wire.post("/x", {}, 5)
        assert missing.status_code == 404 and missing.text.startswith('{"error": "unknown container')
        assert len(wire.idle) == 1
        server.close_after = True  # the end of the connection ends the next answer
        assert (await wire.post("/x", {}, 5)).json() == {"b": 2}
        assert wire.idle == []  # the end of the connection framed the answer: not kept
    finally:
        wire.close()


async def test_a_connection_the_node_closed_or_that_expired_is_not_reused(serve):
    server = await serve(lambda req: ok({}, "Connection: close\r\n"))
    wire = wire_to(server.url, expiry=0.0)
    try:
        await wire.post("/x", {}, 5)
        await wire.post("/x", {}, 5)
        assert server.connections == 2 and wire.idle == []
        server.script = lambda req: ok({})
        await wire.post("/x", {}, 5)
        await wire.post("/x", {}, 5)  # the kept one expired at once
    finally:
        wire.close()
    assert server.connections == 4


@pytest.mark.parametrize(
    "answer",
    [None, b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", b"HTTP/1.1 2x\r\n\r\n"],
)
async def test_a_node_that_cuts_or_garbles_the_answer_is_a_wire_error(serve, answer):
    server = await serve(lambda req: answer)
    server.close_after = True
    wire = wire_to(server.url)
    try:
        with pytest.raises(WireError) as err:
            await wire.post("/x", {}, 5)
    finally:
        wire.close()
    assert not isinstance(err.value, WireTimeout) and wire.idle == []


async def test_a_silent_node_is_a_timeout_and_a_refused_port_a_wire_error(serve):
    server = await serve(lambda req: b"")  # reads the request, answers nothing
    wire = wire_to(server.url)
    try:
        with pytest.raises(WireTimeout):
            await wire.post("/x", {}, 0.2)
        assert wire.idle == []
    finally:
        wire.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(WireError) as err:
            await wire_to(f"http://127.0.0.1:{port}").post("/x", {}, 5)
    assert not isinstance(err.value, (WireTimeout, WireConnectTimeout))


async def test_a_node_that_accepts_no_connection_is_a_connect_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        fillers = []
        try:
            for _ in range(8):  # fill the accept queue: further connects hang
                f = socket.socket()
                f.setblocking(False)
                f.connect_ex(s.getsockname())
                fillers.append(f)
            with pytest.raises(WireConnectTimeout):
                await wire_to(f"http://127.0.0.1:{s.getsockname()[1]}", connect_timeout=0.2).post("/x", {}, 5)
        finally:
            for f in fillers:
                f.close()


def test_bad_urls_and_tokens_are_refused():
    with pytest.raises(ValueError):
        wire_to("ftp://host")
    with pytest.raises(ValueError):
        NodeWire("http://host", "tok\r\nX-Evil: 1", ssl_context=None, connect_timeout=1)


async def test_routing_maps_wire_failures_like_httpx_ones(serve):
    """A node that cuts the call is marked down (503 node_down); a silent one is a 504."""
    server = await serve(lambda req: None)
    nodes = NodeSet([server.url], down_after=3)
    node = nodes.get(server.url)
    node.healthy = True
    calls = NodeCalls([server.url], nodes, "tok", connect_timeout=1, shards=1)
    calls.open()
    try:
        with pytest.raises(ApiError) as err:
            await calls.route_post(node, "/container/exec", {}, 5)
        assert err.value.status == 503 and err.value.extra["node_down"] and not node.healthy
        node.healthy = True
        server.script = lambda req: b""
        with pytest.raises(ApiError) as err:
            await calls.route_post(node, "/container/exec", {}, 0.2)
        assert err.value.status == 504 and node.healthy
    finally:
        await calls.aclose()


class StaleCloser(Server):
    """Answers the first request of each connection, then closes it when the next request arrives, without
    reading or answering it: an idle connection closed by the node just as the client reused it."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head)
            writer.write(ok({"n": len(self.requests)}))
            await writer.drain()
            await reader.read(1)  # the next request started: close under it, unread
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_a_reused_connection_closed_before_answering_is_sent_once_more_on_a_fresh_one():
    """One stale kept-alive connection is not a down node: the call goes again on a fresh connection, and
    the node saw it once (it closed the stale one without reading the request)."""
    server = StaleCloser(lambda req: None)
    await server.start()
    wire = wire_to(server.url)
    try:
        assert (await wire.post("/x", {}, 5)).json() == {"n": 1}
        assert len(wire.idle) == 1
        assert (await wire.post("/x", {}, 5)).json() == {"n": 2}  # the stale one, then a fresh one
    finally:
        wire.close()
        assert server.server is not None
        server.server.close()
    assert server.connections == 2 and len(server.requests) == 2


async def test_a_break_after_part_of_an_answer_is_never_sent_again(serve):
    """Bytes of an answer came: the call reached the node and may have run, so it is an error, not a retry."""
    answers = iter([ok({}), b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nsho"])
    server = await serve(lambda req: next(answers))
    wire = wire_to(server.url)
    try:
        await wire.post("/x", {}, 5)
        server.close_after = True
        with pytest.raises(WireError):
            await wire.post("/x", {}, 5)
    finally:
        wire.close()
    assert len(server.requests) == 2


async def test_idle_connections_past_their_expiry_are_closed_oldest_first_not_when_reached(serve):
    server = await serve(lambda req: ok({}))
    wire = wire_to(server.url, expiry=0.5)
    try:
        await asyncio.gather(*(wire.post("/x", {}, 5) for _ in range(3)))
        older, newest = wire.idle[:2], wire.idle[2]
        await asyncio.sleep(0.6)  # all three past their expiry ...
        newest.idle_since = time.monotonic()  # ... but the newest, as if it had just been used
        await wire.post("/x", {}, 5)  # reuses the newest; the two older ones, never reached, are closed
        assert wire.idle == [newest]
        assert all(conn.writer.is_closing() for conn in older)
    finally:
        wire.close()
    assert server.connections == 3


def test_direct_calls_keep_fewer_idle_connections_for_less_time_than_the_pool():
    from swe_rl.fleet.client_config import EnvClientConfig
    from swe_rl.fleet.direct_client import IDLE_SECONDS, KEEP_PER_NODE, NodeWires
    from swe_rl.fleet.pool.node_wire import EXPIRY, KEEP

    wire = NodeWires(EnvClientConfig(pool_url="http://127.0.0.1:1")).of("http://127.0.0.1:2")
    assert (wire.keep, wire.expiry) == (KEEP_PER_NODE, IDLE_SECONDS)
    assert KEEP_PER_NODE < KEEP and IDLE_SECONDS < EXPIRY
