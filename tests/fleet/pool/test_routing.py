"""Timeouts of routed calls, and connect timeouts to a busy node (a real HTTP server whose accept queue is
full); the forwarding itself is covered by test_pool_server.py and test_lease_liveness.py."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from swe_rl.fleet.pool.nodes import Node, NodeSet
from swe_rl.fleet.pool.routing import DEFAULT_EVAL_TIMEOUT, DEFAULT_EXEC_TIMEOUT, NodeCalls, call_timeout
from swe_rl.fleet.protocol import EVAL_APPLY_ALLOWANCE, PLAIN_CALL_TIMEOUT, ApiError


def test_exec_gets_an_explicit_timeout():
    payload: dict = {"command": "true"}
    assert call_timeout("exec", payload) == DEFAULT_EXEC_TIMEOUT
    assert payload["timeout"] == DEFAULT_EXEC_TIMEOUT  # the node's own default cannot outlast the call
    assert call_timeout("exec", {"timeout": 5}) == 5.0


def test_evaluate_adds_the_patch_apply_allowance():
    payload: dict = {}
    assert call_timeout("evaluate", payload) == DEFAULT_EVAL_TIMEOUT + EVAL_APPLY_ALLOWANCE
    assert call_timeout("evaluate", {"timeout": 60}) == 60 + EVAL_APPLY_ALLOWANCE


def test_bad_timeouts_fall_back_to_the_default_and_plain_calls_have_theirs():
    assert call_timeout("exec", {"timeout": -1}) == DEFAULT_EXEC_TIMEOUT
    assert call_timeout("exec", {"timeout": True}) == DEFAULT_EXEC_TIMEOUT
    assert call_timeout("exec", {"timeout": float("nan")}) == DEFAULT_EXEC_TIMEOUT
    for op in ("diff", "read_file", "write_file"):
        assert call_timeout(op, {"timeout": 5}) == PLAIN_CALL_TIMEOUT


# --------------------------------------------------------------------------- connect timeouts


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class BusyNode:
    """A real HTTP server whose accept queue is full until `serve()`: connects to it time out, as to a
    node too busy to accept (the loaded simulated fleet's case)."""

    def __init__(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # one pending connection fills it
        self.port = listener.getsockname()[1]
        self.filler = socket.create_connection(("127.0.0.1", self.port))
        self.server = http.server.HTTPServer(("127.0.0.1", self.port), _Answer, bind_and_activate=False)
        self.server.socket.close()
        self.server.socket = listener
        self.thread: threading.Thread | None = None

    def serve(self) -> None:
        self.server.socket.accept()[0].close()  # the filler: room in the queue again
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.thread is not None:
            self.server.shutdown()
            self.thread.join(10)
        self.server.server_close()
        self.filler.close()


@pytest.fixture
def busy_node() -> Iterator[BusyNode]:
    node = BusyNode()
    try:
        yield node
    finally:
        node.close()


async def _calls_to(busy: BusyNode, on_timeout: Callable[[int, Node], None]) -> tuple[NodeCalls, Node]:
    url = f"http://127.0.0.1:{busy.port}"
    nodes = NodeSet([url], down_after=2)
    node = nodes.get(url)
    node.healthy = True
    calls = NodeCalls([url], nodes, "token", connect_timeout=0.2, shards=1)
    calls.open()
    (client,) = calls.shards_of(url)
    real_post = client.post
    timeouts = 0

    async def post(*args: Any, **kwargs: Any) -> Any:
        nonlocal timeouts
        try:
            return await real_post(*args, **kwargs)
        except httpx.ConnectTimeout:
            timeouts += 1
            on_timeout(timeouts, node)
            raise

    client.post = post  # type: ignore[method-assign]
    return calls, node


async def test_a_node_too_busy_to_accept_is_tried_again_while_it_is_up(busy_node):
    """Two connect timeouts used to be a 503 node_down for a node that was only busy."""
    calls, node = await _calls_to(busy_node, lambda n, _: busy_node.serve() if n == 2 else None)
    try:
        resp = await calls.post(node, "/container/exec", {}, timeout=60)
    finally:
        await calls.aclose()
    assert resp.status_code == 200 and resp.json() == {"ok": True}


async def test_a_node_that_accepts_nothing_and_is_judged_down_is_a_503(busy_node):
    def judged_down(n: int, node: Node) -> None:
        node.healthy = False  # the health checks took it down meanwhile

    calls, node = await _calls_to(busy_node, judged_down)
    try:
        with pytest.raises(ApiError) as err:
            await calls.post(node, "/container/exec", {}, timeout=60)
    finally:
        await calls.aclose()
    assert err.value.status == 503 and err.value.extra["node_down"] is True
    assert "2 connect timeouts" in err.value.message


async def test_a_node_that_accepts_nothing_within_the_calls_time_is_a_503(busy_node):
    calls, node = await _calls_to(busy_node, lambda n, _: None)
    try:
        with pytest.raises(ApiError) as err:
            await calls.post(node, "/container/exec", {}, timeout=0.5)  # room for two tries of 0.2 s
    finally:
        await calls.aclose()
    assert err.value.status == 503 and "connect timeouts" in err.value.message
