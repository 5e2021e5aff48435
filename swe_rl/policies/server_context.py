"""The policy server's context window: asked once, the plugin's token budget clamped to it.

A plugin budget (``swe_max_context_len`` / ``--rollout-max-context-len``) larger than the
window the SGLang server was started with makes every long turn an HTTP 400, which used to
end each rollout as a removed sample, silently in aggregate. So at the first rollout of a
process the plugin asks the server (through the router, which forwards these routes):

- ``GET /v1/models``        -> ``data[].max_model_len`` (the effective context length);
- ``GET /get_model_info``   -> ``context_length`` where a server version reports it;
- ``GET /get_server_info``  -> ``context_length`` (the server argument, null unless set) and
  ``max_total_num_tokens`` (the KV-cache size, which caps one request as well);
  newer servers answer the same on ``/server_info``.

The smallest context found (capped by ``max_total_num_tokens``) is the server's window.
SGLang refuses a request whose input plus ``max_new_tokens`` reaches it, so the usable budget
is one less. A budget above the window is clamped, with one warning per server; a budget equal
to it is used less one (an info line: it is not "larger"); no budget at all takes the server's. An overflow answer that still comes (a server that tells nothing) is
recognised by `context_overflow` and teaches the window for the next rollouts.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import httpx

__all__ = ["ContextBudget", "context_overflow", "fetch_context_length"]

log = logging.getLogger(__name__)

INFO_PATHS = ("/v1/models", "/get_model_info", "/get_server_info", "/server_info")
CONTEXT_KEYS = ("context_length", "context_len", "max_context_length", "max_model_len")

# SGLang: "The input (N tokens) is longer than the model's context length (C tokens)." and
# "Requested token count exceeds the model's maximum context length of C tokens. ..."
_OVERFLOW = [
    re.compile(r"longer than the model's context length \((\d+) tokens\)", re.I),
    re.compile(r"maximum context length (?:of|is) (\d+) tokens", re.I),
    re.compile(r"exceeds? the (?:available )?context (?:size|window|length)", re.I),
]


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _from_body(body: Any) -> tuple[list[int], list[int]]:
    """(context lengths, caps) one info answer states."""
    contexts: list[int] = []
    caps: list[int] = []
    if not isinstance(body, dict):
        return contexts, caps
    for card in body.get("data") or []:  # /v1/models
        if isinstance(card, dict) and (n := _positive(card.get("max_model_len"))):
            contexts.append(n)
    for key in CONTEXT_KEYS:
        if n := _positive(body.get(key)):
            contexts.append(n)
    if n := _positive(body.get("max_total_num_tokens")):
        caps.append(n)
    return contexts, caps


async def fetch_context_length(
    http: httpx.AsyncClient, generate_url: str, timeout: float = 10.0
) -> int | None:
    """The server's context window in tokens, or None when none of its info routes says."""
    base = generate_url.rsplit("/generate", 1)[0]
    contexts: list[int] = []
    caps: list[int] = []
    for path in INFO_PATHS:
        try:
            resp = await http.get(base + path, timeout=timeout)
            body = resp.json() if resp.status_code == 200 else None
        except httpx.TransportError:
            break  # not reachable (the first /generate will say so): do not wait on every route
        except (httpx.HTTPError, ValueError):
            continue
        found, capped = _from_body(body)
        contexts += found
        caps += capped
    if not contexts:
        return None
    return min(min(contexts), *caps) if caps else min(contexts)


def context_overflow(error_text: str) -> int | None:
    """For a 4xx answer: the context length it names when it is a context overflow (0 when it names
    none), None when it is some other refusal."""
    for pattern in _OVERFLOW:
        match = pattern.search(error_text)
        if match:
            return int(match.group(1)) if match.groups() else 0
    return None


class ContextBudget:
    """Per rollout process: each server's window, asked once, and the budget clamped to it."""

    def __init__(self) -> None:
        self.known: dict[str, int | None] = {}
        self._warned: set[tuple[str, int | None, int]] = set()
        self._lock = asyncio.Lock()

    async def budget(self, http: httpx.AsyncClient, url: str, configured: int | None) -> int | None:
        """The context budget of a rollout against ``url``: ``configured`` clamped to the server's window."""
        if url not in self.known:
            async with self._lock:
                if url not in self.known:
                    self.known[url] = await fetch_context_length(http, url)
                    if self.known[url] is None:
                        log.info(
                            "the policy server at %s does not state its context length; budget stays %s",
                            url,
                            configured,
                        )
        window = self.known[url]
        if window is None:
            return configured
        usable = window - 1  # SGLang refuses input + max_new_tokens >= its context length
        if configured is not None and configured <= usable:
            return configured
        key = (url, configured, window)
        if key not in self._warned:
            self._warned.add(key)
            if configured == window:  # the same number: only SGLang's one token of room differs
                log.info(
                    "context budget %d equals the policy server's context length (%s); SGLang needs "
                    "input + max_new_tokens below it, so turns use %d",
                    configured,
                    url,
                    usable,
                )
            elif configured is None:
                log.info(
                    "context budget: the policy server's context length %d (no swe_max_context_len / "
                    "--rollout-max-context-len set)",
                    window,
                )
            else:
                log.warning(
                    "context budget %d is larger than the policy server's context length %d (%s): "
                    "clamped to %d; start SGLang with a longer --context-length or lower "
                    "swe_max_context_len / --rollout-max-context-len",
                    configured,
                    window,
                    url,
                    usable,
                )
        return usable

    def learn(self, url: str, window: int) -> None:
        """A window named by an overflow answer: later rollouts are clamped to it."""
        old = self.known.get(url)
        self.known[url] = min(old, window) if old else window
