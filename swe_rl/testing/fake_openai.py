"""A scripted OpenAI-compatible chat server on loopback, for tests.

    with FakeOpenAI(["```bash\\nls\\n```", ChatReply("done", reasoning_content="hmm")]) as server:
        policy = OpenAIChatPolicy(OpenAIChatConfig(model="fake", api_base=server.base_url))
        ...
        server.requests[1]["messages"]      # what the client sent on the second call

It is a real HTTP server (Starlette under uvicorn, in a thread) speaking
``POST /v1/chat/completions`` (non-streaming) and ``GET /v1/models`` (``models``; None: a 404). Each call takes
the next scripted reply; a reply can be a string (the content), a `ChatReply`, or a
callable that gets the request body and returns either. Every request body is kept
in ``requests``. When the script runs out, the server answers 500.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from swe_rl.testing.loopback_server import LoopbackServer


@dataclass
class ChatReply:
    """One scripted answer."""

    content: str = ""
    reasoning_content: str | None = None
    finish_reason: str = "stop"
    status: int = 200
    """Non-200 answers with an OpenAI-style error body (to test retries and failures)."""
    delay: float = 0.0
    """Seconds to wait before answering (to test deadlines and timeouts)."""
    tool_calls: list[dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None
    """Overrides the computed usage block."""


Script = str | ChatReply | Callable[[dict[str, Any]], str | ChatReply]


@dataclass
class FakeOpenAI(LoopbackServer):
    """Plays `script` one reply per request; use as a context manager."""

    script: list[Script] = field(default_factory=list)
    api_key: str | None = None
    """When set, requests must carry ``Authorization: Bearer <api_key>``."""
    models: list[str] | None = field(default_factory=lambda: ["fake"])
    """The ids ``GET /v1/models`` lists; None: the server has no such route (404), as some do not."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.script = list(self.script)
        self._lock = threading.Lock()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *replies: Script) -> None:
        with self._lock:
            self.script.extend(replies)

    @property
    def calls(self) -> int:
        return len(self.requests)

    # ------------------------------------------------------------------ server

    async def _completions(self, request: Request) -> JSONResponse:
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse({"error": {"message": "bad api key", "type": "invalid_request_error"}}, 401)
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            item = self.script.pop(0) if self.script else None
        if item is None:
            return JSONResponse(
                {"error": {"message": "fake server: script exhausted", "type": "server_error"}}, 500
            )
        reply = item(body) if callable(item) else item
        if isinstance(reply, str):
            reply = ChatReply(content=reply)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return JSONResponse(
                {"error": {"message": reply.content or "scripted error", "type": "server_error"}},
                reply.status,
            )
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning_content is not None:
            message["reasoning_content"] = reply.reasoning_content
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        completion = len(reply.content) + len(reply.reasoning_content or "")
        usage = reply.usage or {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, completion // 4),
            "total_tokens": max(1, prompt_chars // 4) + max(1, completion // 4),
            "completion_tokens_details": {"reasoning_tokens": len(reply.reasoning_content or "") // 4},
        }
        return JSONResponse(
            {
                "id": "chatcmpl-" + secrets.token_hex(8),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
                "usage": usage,
            }
        )

    async def _models(self, request: Request) -> JSONResponse:
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse({"error": {"message": "bad api key", "type": "invalid_request_error"}}, 401)
        if self.models is None:
            return JSONResponse({"detail": "Not Found"}, 404)
        data = [{"id": m, "object": "model", "owned_by": "tests"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    def routes(self) -> list[Route]:
        return [
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ]
