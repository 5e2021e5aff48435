"""Head + tail context: what of a long episode's history a new training segment keeps.

When the context outgrows its budget, the new context is the original prompt, a head of turn pairs
(a sampled turn and the observation after it, oldest first, up to ``head_ratio`` of the room), an
omission marker standing for the pairs left out, and a tail of the newest pairs (up to
``tail_ratio``; the newest pair always stays). Pairs are reused as the very ids the model saw and
their lengths are known, so choosing and building the new context costs the size of what is kept,
never a re-tokenization of the history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swe_rl.tokens.trajectory import Turn

__all__ = ["KeptContext", "head_tail_context"]


@dataclass(frozen=True)
class KeptContext:
    """The ids of a compacted context and what of the history they keep."""

    tokens: list[int]
    """Prompt, head pairs, marker (when pairs were left out), tail pairs; ends with the assistant header."""
    omitted_turns: int
    """Pairs left out (stood for by the marker)."""
    kept_turns: int
    """Pairs kept (head and tail)."""


def head_tail_context(
    prompt_ids: Sequence[int],
    pairs: Sequence[Turn],
    budget: int,
    marker: Callable[[int], list[int]],
    *,
    header_len: int,
    head_ratio: float = 0.3,
    tail_ratio: float = 0.7,
) -> KeptContext | None:
    """Prompt + head pairs + marker + tail pairs within ``budget`` ids; None when even prompt + marker +
    newest pair exceed it. ``marker(n)`` gives the ids of the marker for ``n`` omitted pairs, ending with
    its own assistant header (``header_len`` ids, which the pair before it then drops)."""
    room = budget - len(prompt_ids) - len(marker(len(pairs))) + header_len
    tail_budget, head_budget = int(room * tail_ratio), int(room * head_ratio)
    first_tail, used = len(pairs) - 1, pairs[-1].pair_len
    while first_tail > 0 and used + pairs[first_tail - 1].pair_len <= tail_budget:
        first_tail -= 1
        used += pairs[first_tail].pair_len
    n_head, head_used = 0, 0
    while n_head < first_tail and head_used + pairs[n_head].pair_len <= head_budget:
        head_used += pairs[n_head].pair_len
        n_head += 1
    omitted = first_tail - n_head
    tokens = list(prompt_ids)
    for turn in pairs[:n_head]:
        tokens += turn.ids
        tokens += turn.observation
    if omitted:
        del tokens[len(tokens) - header_len :]  # the marker brings its own assistant header
        tokens += marker(omitted)
    for turn in pairs[first_tail:]:
        tokens += turn.ids
        tokens += turn.observation
    if len(tokens) > budget:
        return None
    return KeptContext(tokens=tokens, omitted_turns=omitted, kept_turns=n_head + len(pairs) - first_tail)
