"""slime's replay fields and rollout-metric counts on the plugin's samples, as slime's own path fills them.

slime's multi-turn path (``Sample.append_response_tokens`` at the pin) fills a sample from the SGLang answers
of its calls: ``rollout_routed_experts`` (one row of ``num_layers × moe_router_topk`` expert ids per position
of ``tokens[:-1]``, from the latest call: routing replay), ``rollout_top_p_token_ids`` / ``_offsets`` (the
kept ids of every response id; environment ids get empty spans: top-p replay), ``prefix_cache_info`` and
``spec_info`` (summed over the calls: ``rollout/prefix_cache_hit_rate``, ``rollout/spec_accept_*``). The
plugin cuts one episode into several samples, so each sample gets these from the calls its tokens came from
(`swe_rl.tokens.replay.TurnMeta` on each turn):

- a segment sample: rows of the segment's last call (they cover the whole segment: every call of a segment
  sees all of it; a compacted segment's rows come from its own calls only), the top-p spans of its turns
  with empty spans over its observations, the counts of its calls;
- a turn sample: rows and spans of its own call, its call's counts;
- ``samples: last`` (one sample per rollout): the last segment's rows and spans, the counts of every call.

So every call is counted exactly once over a rollout's samples, and slime's ratio of sums is the true hit
rate. A removed sample gets what slime's conversion needs of every sample once one has them: empty top-p
spans, and placeholder rows (its loss mask is zero) that slime's R3 check accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swe_rl.tokens.replay import int32_bytes, ints
from swe_rl.tokens.trajectory import Segment, Turn

__all__ = ["ReplaySettings", "fill_removed", "fill_segment", "fill_turn"]


@dataclass(frozen=True)
class ReplaySettings:
    """What of slime's replay a run uses (from slime's args)."""

    routing: bool = False
    """``--use-rollout-routing-replay``: every sample needs its routed experts."""
    num_layers: int = 0
    moe_router_topk: int = 0
    num_experts: int = 0
    top_p: bool = False
    """``--rollout-top-p`` below 1: every sample needs its top-p ids and offsets."""
    speculative: bool = False
    """``--sglang-speculative-algorithm`` set: slime then sums the speculative counts too."""

    @classmethod
    def from_args(cls, args: Any) -> ReplaySettings:
        routing = bool(getattr(args, "use_rollout_routing_replay", False))
        return cls(
            routing=routing,
            num_layers=int(getattr(args, "num_layers", 0) or 0) if routing else 0,
            moe_router_topk=int(getattr(args, "moe_router_topk", 0) or 0) if routing else 0,
            num_experts=int(getattr(args, "num_experts", 0) or 0) if routing else 0,
            top_p=float(getattr(args, "rollout_top_p", 1.0) or 1.0) != 1.0,
            speculative=bool(getattr(args, "sglang_speculative_algorithm", None)),
        )


def fill_segment(
    sample: Any, seg: Segment, settings: ReplaySettings, calls: list[Turn] | None = None
) -> None:
    """A segment sample (``tokens = seg.tokens[:seg.end]``); ``calls``: whose counts it carries (its turns)."""
    last = seg.turns[-1]
    _routing(sample, last, settings)
    _top_p(sample, [(t, t is not last) for t in seg.turns], settings)
    _stats(sample, seg.turns if calls is None else calls, settings)


def fill_turn(sample: Any, turn: Turn, settings: ReplaySettings) -> None:
    """A turn sample (its response is exactly the turn's sampled ids)."""
    _routing(sample, turn, settings)
    _top_p(sample, [(turn, False)], settings)
    _stats(sample, [turn], settings)


def fill_removed(sample: Any, settings: ReplaySettings) -> None:
    """A removed sample (zero loss mask): empty top-p spans, placeholder rows of valid expert ids."""
    if settings.top_p:
        sample.rollout_top_p_token_ids = _tensor([])
        sample.rollout_top_p_token_offsets = _tensor([0] * (sample.response_length + 1))
    if settings.routing:
        rows, width = len(sample.tokens) - 1, settings.num_layers * settings.moe_router_topk
        experts = max(settings.num_experts, settings.moe_router_topk, 1)
        flat = [i % experts for i in range(rows * width)]  # distinct per row, as slime pads rows
        sample.rollout_routed_experts = _rows(int32_bytes(flat), rows, settings)


def _routing(sample: Any, turn: Turn, settings: ReplaySettings) -> None:
    if not settings.routing:
        return
    meta = turn.meta
    if meta is None or meta.routed_experts is None:
        raise ValueError(f"turn {turn.index} kept no routed experts (--use-rollout-routing-replay)")
    width = settings.num_layers * settings.moe_router_topk
    rows = len(sample.tokens) - 1
    if meta.routed_width != width or meta.routed_rows != rows:
        raise ValueError(
            f"turn {turn.index}: routed experts of {meta.routed_rows} rows × {meta.routed_width} do not fit "
            f"{rows} positions × num_layers {settings.num_layers} × moe_router_topk {settings.moe_router_topk}"
        )
    sample.rollout_routed_experts = _rows(meta.routed_experts, rows, settings)


def _top_p(sample: Any, pieces: list[tuple[Turn, bool]], settings: ReplaySettings) -> None:
    """Spans of each turn's sampled ids, then (when ``True``) empty spans over the observation after it."""
    metas = [turn.meta for turn, _ in pieces]
    if not all(m is not None and m.top_p_offsets is not None for m in metas):
        if settings.top_p:
            raise ValueError("a turn kept no top-p token ids (--rollout-top-p below 1)")
        return
    ids: list[int] = []
    offsets = [0]
    for turn, observation in pieces:
        meta = turn.meta
        assert meta is not None and meta.top_p_ids is not None and meta.top_p_offsets is not None
        base = len(ids)
        ids += ints(meta.top_p_ids)
        offsets += [base + o for o in ints(meta.top_p_offsets)[1:]]
        if observation:
            offsets += [len(ids)] * len(turn.observation)
    if len(offsets) != sample.response_length + 1:
        raise ValueError(f"{len(offsets)} top-p offsets for a response of {sample.response_length} ids")
    sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets = _tensor(ids), _tensor(offsets)


def _stats(sample: Any, calls: list[Turn], settings: ReplaySettings) -> None:
    cache, spec = sample.prefix_cache_info, sample.spec_info
    for turn in calls:
        if turn.meta is None:
            continue
        stats = turn.meta.stats
        cache.cached_tokens += stats.cached_tokens
        cache.total_prompt_tokens += stats.prompt_tokens
        if settings.speculative:
            spec.spec_accept_token_num += stats.spec_accept_token_num
            spec.spec_draft_token_num += stats.spec_draft_token_num
            spec.spec_verify_ct += stats.spec_verify_ct
            spec.completion_token_num += stats.completion_tokens


def _tensor(values: list[int]) -> Any:
    """An int32 tensor as slime's path builds (a list where torch is absent: slime accepts both)."""
    try:
        import torch
    except ImportError:
        return values
    return torch.tensor(values, dtype=torch.int32)


def _rows(raw: bytes, rows: int, settings: ReplaySettings) -> Any:
    """``rows × num_layers × moe_router_topk`` expert ids (an int32 tensor as slime's path decodes; nested lists
    where torch is absent). Read straight from the bytes: a long context has millions of ids."""
    layers, topk = settings.num_layers, settings.moe_router_topk
    try:
        import torch
    except ImportError:
        flat, width = ints(raw), layers * topk
        return [
            [flat[r * width + k * topk : r * width + (k + 1) * topk] for k in range(layers)]
            for r in range(rows)
        ]
    return torch.frombuffer(bytearray(raw), dtype=torch.int32).reshape(rows, layers, topk)
