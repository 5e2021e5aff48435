"""A scripted SGLang router on loopback speaking the native ``POST /generate`` with token ids.

    with FakeSGLang(tokenizer, ["<think>\\nlook\\n</think>\\n\\n```bash\\nls\\n```"]) as sglang:
        args.sglang_router_ip, args.sglang_router_port = "127.0.0.1", sglang.port
        ...
        sglang.requests[1]["input_ids"]     # the context of the second call
        sglang.outputs[0].ids               # what the first call sampled

A real HTTP server (Starlette under uvicorn, in a thread). Each call takes the next
scripted reply: a string (the model's text; tokenized, then ``<|im_end|>`` appended as a
stop would), a `TokenReply`, or a callable given the request body that returns either. The
answer has SGLang's shape: ``text``, ``output_ids`` and ``meta_info`` with
``finish_reason`` ({"type": "stop" | "length" | "abort", ...}), ``prompt_tokens``,
``completion_tokens``, ``cached_tokens`` and ``output_token_logprobs`` as
``[logprob, token_id, None]`` triples. ``sampling_params.max_new_tokens`` is honoured
(output cut, finish ``length``). When the script runs out the server answers 500.

It keeps a prefix cache as SGLang's radix cache does (`swe_rl.testing.fake_sglang_extras`): ``cached_tokens``
is the longest prefix of the input that an earlier call computed (input and output, its last output id
excepted), at most the input less one id. With ``moe`` set it is a mixture-of-experts server started with
``--enable-return-routed-experts``: a request with ``return_routed_experts`` gets ``meta_info.routed_experts``
(base64 of int32, ``[positions, num_layers, topk]``, positions ``[routed_experts_start_len, input + output -
1)``), cached positions keeping the rows their first call computed. ``sampling_params.custom_params.
return_top_p_token_ids`` gets ``top_p_token_ids`` / ``top_p_token_offsets`` (slime's SGLang top-p patch);
``speculative`` adds ``spec_verify_ct``, ``spec_accept_token_num``, ``spec_draft_token_num``.

With ``context_length`` set it behaves like a server started with that window: a request whose
input reaches it, or whose input plus ``max_new_tokens`` does, gets SGLang's HTTP 400
(``{"error": {"message": "The input (N tokens) is longer than the model's context length (C
tokens)."}}`` / ``"Requested token count exceeds the model's maximum context length of C
tokens. ..."``), and, unless ``advertise_context`` is off, the info routes say the window as
SGLang does: ``GET /v1/models`` (``data[].max_model_len``), ``GET /get_server_info`` and
``/server_info`` (the server arguments with ``context_length``, plus ``max_total_num_tokens``,
``max_req_input_len``, ``internal_states``, ``version``), ``GET /get_model_info`` (model path,
``is_generation``, ``weight_version``; no context length, as in SGLang).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from swe_rl.testing.fake_sglang_extras import PrefixCache, replay_meta
from swe_rl.testing.loopback_server import LoopbackServer

IM_END = 151645


@dataclass
class TokenReply:
    """One scripted generation."""

    text: str = ""
    """The model's output text (tokenized by the server's tokenizer)."""
    ids: list[int] | None = None
    """Exact output ids instead of text (no end-of-turn added)."""
    finish_reason: str = "stop"
    """stop / length / abort."""
    stop_token: int | None = IM_END
    """Id appended on a stop finish (SGLang keeps the matched stop token in output_ids)."""
    logprobs: list[float] | None = None
    """Log-probs to report; default: a deterministic sequence, distinct per position."""
    status: int = 200
    """Non-200 answers with an error body."""
    delay: float = 0.0
    """Seconds to wait before answering."""
    weight_version: str | None = None


@dataclass
class Output:
    """What one call returned (for assertions)."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str


Script = str | TokenReply | Callable[[dict[str, Any]], str | TokenReply]


@dataclass
class FakeSGLang(LoopbackServer):
    """Plays `script`, one reply per /generate; use as a context manager."""

    tokenizer: Any
    script: list[Script] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """HTTP headers of each request (lower-case names), e.g. slime's routing key."""
    keyed: dict[str, list[Script]] = field(default_factory=dict)
    """Scripts per routing key (``X-SMG-Routing-Key``, slime's session id): concurrent trajectories each play
    their own; requests without a known key take from `script`."""
    outputs: list[Output] = field(default_factory=list)
    context_length: int | None = None
    """The server's context window (None: no limit, and the info routes are absent)."""
    advertise_context: bool = True
    """Whether the info routes answer (off: a server/router that tells nothing, but still refuses)."""
    max_total_num_tokens: int | None = None
    """KV-cache size reported by /get_server_info (default: 8 x context_length)."""
    info_requests: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """The messages of requests refused for the context window (those requests are in ``requests`` too)."""
    moe: tuple[int, int, int] | None = None
    """``(num_layers, topk, num_experts)``: a MoE model served with ``--enable-return-routed-experts``."""
    speculative: bool = False
    """Report speculative-decoding counts (a server with a speculative algorithm)."""
    answers: list[dict[str, Any]] = field(default_factory=list)
    """The ``meta_info`` of every answer, in order (what slime's own path would have read)."""

    def __post_init__(self) -> None:
        self.script = list(self.script)
        self._lock = threading.Lock()
        self.port = 0
        self.cache = PrefixCache()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *replies: Script) -> None:
        with self._lock:
            self.script.extend(replies)

    # ------------------------------------------------------------------ server

    def _ids(self, reply: TokenReply) -> list[int]:
        if reply.ids is not None:
            return list(reply.ids)
        ids = list(self.tokenizer.encode(reply.text, add_special_tokens=False))
        if reply.finish_reason == "stop" and reply.stop_token is not None:
            ids.append(reply.stop_token)
        return ids

    async def _generate(self, request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body.get("input_ids"), list) or not body.get("return_logprob"):
            return JSONResponse({"error": "fake sglang: expects input_ids and return_logprob"}, 400)
        with self._lock:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            refusal = self._context_refusal(body)
            if (
                refusal is not None
            ):  # refused before the script is consulted: the reply stays for the next call
                self.refusals.append(refusal)
                return JSONResponse({"error": {"message": refusal}}, 400)
            queue = self.keyed.get(request.headers.get("x-smg-routing-key", ""), self.script)
            item = queue.pop(0) if queue else None
        if item is None:
            return JSONResponse({"error": "fake sglang: script exhausted"}, 500)
        reply = item(body) if callable(item) else item
        if isinstance(reply, str):
            reply = TokenReply(text=reply)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return JSONResponse({"error": reply.text or "scripted error"}, reply.status)
        ids = self._ids(reply)
        finish: dict[str, Any] = {"type": reply.finish_reason}
        limit = (body.get("sampling_params") or {}).get("max_new_tokens")
        if limit is not None and len(ids) > limit:
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        elif reply.finish_reason == "stop" and ids and ids[-1] == reply.stop_token:
            finish["matched"] = reply.stop_token
        elif reply.finish_reason == "abort":
            finish["message"] = "aborted by the scripted router"
        logprobs = (
            list(reply.logprobs)
            if reply.logprobs is not None
            else [-round(0.01 + 0.5 * abs(math.sin(len(self.outputs) * 7.1 + i)), 6) for i in range(len(ids))]
        )
        logprobs = logprobs[: len(ids)]
        self.outputs.append(Output(ids=ids, logprobs=logprobs, finish_reason=finish["type"]))
        meta: dict[str, Any] = {
            "id": f"fake-{len(self.outputs)}",
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "output_token_logprobs": [[lp, tid, None] for lp, tid in zip(logprobs, ids)],
        }
        if reply.weight_version is not None:
            meta["weight_version"] = reply.weight_version
        with self._lock:
            extra = replay_meta(self.cache, body, ids, len(self.outputs), self.moe, self.speculative)
        if isinstance(extra, str):
            return JSONResponse({"error": {"message": extra}}, 400)
        meta.update(extra)
        self.answers.append(meta)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return JSONResponse({"text": text, "output_ids": ids, "meta_info": meta})

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    # ------------------------------------------------------------------ context window, as SGLang checks it

    def _context_refusal(self, body: dict[str, Any]) -> str | None:
        ctx = self.context_length
        if ctx is None:
            return None
        n = len(body["input_ids"])
        if n >= ctx:
            return f"The input ({n} tokens) is longer than the model's context length ({ctx} tokens)."
        new = (body.get("sampling_params") or {}).get("max_new_tokens")
        if new is not None and n + new >= ctx:
            return (
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                f"a total of {n + new} tokens: {n} tokens from the input messages and {new} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        return None

    def _advertised(self, request: Request) -> bool:
        self.info_requests.append(request.url.path)
        return self.context_length is not None and self.advertise_context

    async def _models(self, request: Request) -> JSONResponse:
        if not self._advertised(request):
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": "fake",
                        "object": "model",
                        "owned_by": "sglang",
                        "root": "fake",
                        "max_model_len": self.context_length,
                    }
                ],
            }
        )

    async def _model_info(self, request: Request) -> JSONResponse:
        if not self._advertised(request):
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse(
            {
                "model_path": "fake",
                "tokenizer_path": "fake",
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
            }
        )

    async def _server_info(self, request: Request) -> JSONResponse:
        if not self._advertised(request):
            return JSONResponse({"detail": "Not Found"}, 404)
        assert self.context_length is not None
        total = self.max_total_num_tokens or 8 * self.context_length
        return JSONResponse(
            {
                "model_path": "fake",
                "context_length": self.context_length,
                "max_total_num_tokens": total,
                "max_req_input_len": min(self.context_length, total) - 1,
                "internal_states": [{"last_gen_throughput": 0.0}],
                "version": "fake",
            }
        )

    def routes(self) -> list[Route]:
        return [
            Route("/generate", self._generate, methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/get_model_info", self._model_info, methods=["GET"]),
            Route("/get_server_info", self._server_info, methods=["GET"]),
            Route("/server_info", self._server_info, methods=["GET"]),
        ]
