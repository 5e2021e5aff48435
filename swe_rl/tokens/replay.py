"""What one SGLang ``/generate`` answer carries beyond ids and log-probs, kept per turn for slime.

slime's own multi-turn path (``Sample.append_response_tokens`` → ``_apply_meta_info`` at the pin) reads from
every answer: the routed experts of each position (MoE routing replay, ``--use-rollout-routing-replay``),
the top-p kept ids of each sampled token (top-p replay, ``--rollout-top-p`` below 1), and the prefix-cache
and speculative-decoding counts its rollout metrics report. `TurnMeta` keeps exactly those of one call,
decoded once from SGLang's encoding (base64 of int32 bytes), so that `swe_rl.slime.replay` can give any cut
of the trajectory into samples what slime's path would have given the same calls.

Rows of routed experts are per position of a segment: the answer to a call whose context is ``L`` ids and
whose output is ``n`` ids covers positions ``[start, L + n - 1)`` (``routed_experts_start_len``, 0 unless
asked; prefix-cached positions included, SGLang keeps their routing with their KV). A turn's `TurnMeta`
holds the merged rows ``[0, L + n - 1)`` as slime merges them: the rows before ``start`` from the previous
turn of the same segment. A new segment (compaction) re-renders the history, so its rows only ever come
from its own calls.
"""

from __future__ import annotations

import base64
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallStats", "ReplayError", "TurnMeta", "decode_int32", "int32_bytes", "ints", "turn_meta"]


class ReplayError(ValueError):
    """An answer's replay data does not fit its own ids (a server that is not the SGLang slime expects)."""


@dataclass
class CallStats:
    """The counts of one call slime's rollout metrics read (``PrefixCacheInfo.add``, ``SpecInfo.add``)."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> CallStats:
        return cls(**{name: int(meta.get(name) or 0) for name in cls.__dataclass_fields__})


@dataclass
class TurnMeta:
    """One call's replay data (int32 bytes: compact, and copied cheaply when an episode forks)."""

    stats: CallStats = field(default_factory=CallStats)
    routed_experts: bytes | None = None
    """Rows of every position ``[0, start + len(ids) - 1)`` of the turn's segment, ``routed_width`` ints each;
    None when not asked, or released once a later turn of the same segment holds them (segment samples)."""
    routed_width: int = 0
    """Ints per row: layers × top-k experts."""
    top_p_ids: bytes | None = None
    """The kept ids of every sampled id, concatenated (None: not asked)."""
    top_p_offsets: bytes | None = None
    """``len(ids) + 1`` offsets into ``top_p_ids``; sampled id ``i`` kept ``top_p_ids[off[i]:off[i + 1]]``."""

    @property
    def routed_rows(self) -> int:
        if self.routed_experts is None or not self.routed_width:
            return 0
        return len(self.routed_experts) // (4 * self.routed_width)


def decode_int32(value: Any) -> bytes | None:
    """SGLang's int32 arrays in meta_info (base64 of little-endian int32, or a plain list) as raw bytes."""
    if value is None:
        return None
    if isinstance(value, str):
        raw = base64.b64decode(value.encode("ascii"))
        if len(raw) % 4:
            raise ReplayError(f"an int32 array of {len(raw)} bytes")
        return raw
    return int32_bytes([int(v) for v in value])


def int32_bytes(values: list[int]) -> bytes:
    """Little-endian int32 bytes of ``values`` (SGLang's layout)."""
    packed = array("i", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def ints(raw: bytes) -> list[int]:
    """The int32 values of raw little-endian bytes."""
    values = array("i")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def turn_meta(
    meta: dict[str, Any],
    *,
    context_len: int,
    n_ids: int,
    previous: TurnMeta | None,
    want_routing: bool,
    want_top_p: bool,
) -> TurnMeta:
    """The replay data of one answer to a call on ``context_len`` ids that sampled ``n_ids`` ids.

    ``previous``: the meta of the previous turn of the same segment (rows before a ``routed_experts_start_len``
    come from it). Raises `ReplayError` when asked-for data is missing or does not fit the ids."""
    out = TurnMeta(stats=CallStats.from_meta(meta))
    routed = decode_int32(meta.get("routed_experts"))
    if want_routing and routed is None:
        raise ReplayError(
            "the answer has no routed_experts (return_routed_experts asked): start SGLang with "
            "--enable-return-routed-experts (slime does so under --use-rollout-routing-replay)"
        )
    if routed is not None:
        start = int(meta.get("routed_experts_start_len") or 0)
        _merge_routing(out, routed, start, context_len + n_ids - 1, previous)
    top_ids = decode_int32(meta.get("top_p_token_ids", meta.get("top_p_kept_token_ids")))
    offsets = decode_int32(meta.get("top_p_token_offsets", meta.get("top_p_kept_token_offsets")))
    if want_top_p and n_ids == 0 and top_ids is None and offsets is None:
        top_ids, offsets = b"", int32_bytes([0])  # nothing sampled: SGLang sends no spans, slime needs none
    if want_top_p and (top_ids is None or offsets is None):
        raise ReplayError(
            "the answer has no top_p_token_ids / top_p_token_offsets (return_top_p_token_ids asked): "
            "--rollout-top-p below 1 needs slime's SGLang (its top-p patch)"
        )
    if top_ids is not None and offsets is not None:
        off = ints(offsets)
        if len(off) != n_ids + 1 or off[0] != 0 or off[-1] != len(top_ids) // 4:
            raise ReplayError(
                f"top-p offsets {off[:3]}...{off[-1:]} ({len(off)}) do not fit {n_ids} sampled ids and "
                f"{len(top_ids) // 4} kept ids"
            )
        out.top_p_ids, out.top_p_offsets = top_ids, offsets
    return out


def _merge_routing(out: TurnMeta, routed: bytes, start: int, end: int, previous: TurnMeta | None) -> None:
    """Rows ``[0, end)``: the answer's ``[start, end)`` after the previous turn's ``[0, start)``."""
    rows = end - start
    if start < 0 or rows <= 0 or len(routed) % (4 * rows):
        raise ReplayError(
            f"routed_experts of {len(routed) // 4} ints do not fit positions [{start}, {end}) of the context"
        )
    out.routed_width = len(routed) // (4 * rows)
    if start == 0:
        out.routed_experts = routed
        return
    if previous is None or previous.routed_rows < start or previous.routed_width != out.routed_width:
        raise ReplayError(f"routed_experts start at {start} but the segment holds no rows before it")
    assert previous.routed_experts is not None
    out.routed_experts = previous.routed_experts[: start * out.routed_width * 4] + routed
