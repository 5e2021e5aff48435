"""What `FakeSGLang` adds to an answer beyond ids and log-probs, in SGLang's own encoding.

- ``cached_tokens``: a prefix cache like SGLang's radix cache. A call computes the KV of its input and of its
  output but the last id (never fed back); a later call whose input starts with such ids reuses them, at
  most its input less one id (the last input id is always computed, its logits give the first output id).
- ``routed_experts`` (MoE, ``return_routed_experts``): the top-k experts of every layer at every position
  ``[routed_experts_start_len, input + output - 1)``, base64 of little-endian int32, as slime's
  ``decode_int32_meta_array`` reads it. A position's routing is computed once, by the call that computed its
  KV: cached positions keep the rows of the call that cached them, new positions get this call's (which
  differ from any other call's, so a test sees which call a row came from).
- ``top_p_token_ids`` / ``top_p_token_offsets`` (``custom_params.return_top_p_token_ids``, slime's SGLang
  patch): the kept ids of each output id, the sampled id first, base64 int32, offsets ``len(output) + 1``.
- ``spec_verify_ct``, ``spec_accept_token_num``, ``spec_draft_token_num`` (a speculative server).
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PrefixCache", "b64_int32", "replay_meta"]

VOCAB = 151643
"""Ids of kept top-p alternatives stay below the Qwen vocabulary's special ids."""


def b64_int32(values: list[int]) -> str:
    """SGLang's encoding of an int32 array in meta_info: base64 of its little-endian bytes."""
    return base64.b64encode(struct.pack(f"<{len(values)}i", *values)).decode("ascii")


@dataclass
class PrefixCache:
    """Sequences whose KV (and routing) earlier calls computed: ids and one routing row per id. Holds the
    newest ``capacity`` sequences (a finite KV cache evicts): a long bench stays linear."""

    entries: list[tuple[list[int], list[tuple[int, ...]]]] = field(default_factory=list)
    capacity: int = 256

    def match(self, ids: list[int]) -> tuple[int, list[tuple[int, ...]]]:
        """Longest cached prefix of ``ids`` and the rows of its positions."""
        best, rows = 0, []
        for cached, cached_rows in self.entries:
            n = _common_prefix(cached, ids)
            if n > best:
                best, rows = n, cached_rows[:n]
        return best, rows

    def add(self, ids: list[int], rows: list[tuple[int, ...]]) -> None:
        self.entries.append((list(ids), list(rows)))
        del self.entries[: -self.capacity]


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix (binary search over slice comparisons: C speed on long contexts)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _route(call: int, position: int, token: int, layers: int, topk: int, experts: int) -> tuple[int, ...]:
    """One position's experts: ``topk`` distinct ids per layer, different for every call."""
    row: list[int] = []
    for layer in range(layers):
        first = (token * 31 + position * 7 + call * 13 + layer * 3) % experts
        row += [(first + k) % experts for k in range(topk)]
    return tuple(row)


def replay_meta(
    cache: PrefixCache,
    body: dict[str, Any],
    output: list[int],
    call: int,
    moe: tuple[int, int, int] | None,
    speculative: bool,
) -> dict[str, Any] | str:
    """The extra meta_info of one answer (and the cache updated), or an error message (HTTP 400)."""
    ids = list(body["input_ids"])
    seen = ids + output[:-1]  # the ids this call computes the KV (and routing) of
    matched, cached_rows = cache.match(seen)
    cached = min(matched, max(len(ids) - 1, 0))
    meta: dict[str, Any] = {"cached_tokens": cached}
    rows = list(cached_rows[:cached])
    if moe is not None:
        layers, topk, experts = moe
        rows += [_route(call, p, seen[p], layers, topk, experts) for p in range(cached, len(seen))]
    cache.add(seen, rows)
    if body.get("return_routed_experts") and moe is not None:
        start = int(body.get("routed_experts_start_len") or 0)
        if not 0 <= start <= len(ids):
            return f"routed_experts_start_len {start} must be in [0, {len(ids)}]"
        meta["routed_experts"] = b64_int32([e for row in rows[start:] for e in row])
        if start:
            meta["routed_experts_start_len"] = start
    custom = (body.get("sampling_params") or {}).get("custom_params") or {}
    if custom.get("return_top_p_token_ids"):
        kept: list[int] = []
        offsets = [0]
        for i, tid in enumerate(output):
            kept += [tid] + [(tid + 1 + 97 * j) % VOCAB for j in range((call * 3 + i) % 4)]
            offsets.append(len(kept))
        meta["top_p_token_ids"], meta["top_p_token_offsets"] = b64_int32(kept), b64_int32(offsets)
    if speculative and output:
        verify = (len(output) + 1) // 2
        meta.update(
            spec_verify_ct=verify, spec_accept_token_num=len(output) - verify, spec_draft_token_num=3 * verify
        )
    return meta
