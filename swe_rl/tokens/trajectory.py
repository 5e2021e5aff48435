"""`TokenTrajectory`: the exact ids of a multi-turn episode, with loss masks and log-probs, per segment.

    traj = TokenTrajectory(codec.prompt_ids(messages), codec.header_ids)
    traj.add_turn(sampled_ids, logprobs, "stop")                 # what /generate returned, verbatim
    traj.add_observation(codec.observation_ids(assistant_msg, new_user_msgs, sampled_ids[-1]))
    traj.context                                                 # the input_ids of the next call

Nothing is re-tokenized: sampled ids go in as they are (loss mask 1, their log-probs); an
observation's ids (`swe_rl.tokens.codec.ChatCodec`) go in with loss mask 0 and log-prob 0.
When the context outgrows its budget, `TokenTrajectory.compact` starts a new `Segment` from a
head and a tail of the history (`swe_rl.tokens.context`), filled only to a low-water mark so that
the segment holds many turns before the next compaction. A new segment is a new training
context: every sampled turn is trained on exactly the ids it was sampled on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swe_rl.tokens.codec import PrefixError
from swe_rl.tokens.context import head_tail_context
from swe_rl.tokens.replay import TurnMeta

__all__ = ["Segment", "TokenTrajectory", "Turn"]


@dataclass
class Turn:
    """One sampled assistant turn."""

    index: int
    """Turn number in the episode (0-based)."""
    segment: int
    """Segment it was sampled in."""
    start: int
    """Offset of its first id in the segment's tokens (= length of the context it saw)."""
    ids: list[int]
    """Sampled ids, verbatim."""
    logprobs: list[float]
    """Their log-probs."""
    finish_reason: str
    """stop / length / abort as SGLang reported it."""
    observation: list[int] = field(default_factory=list)
    """Ids appended after it (the next observation and header); loss mask 0."""
    meta: TurnMeta | None = None
    """What its SGLang answer carried for slime beyond ids and log-probs (`swe_rl.tokens.replay`)."""

    @property
    def pair_len(self) -> int:
        return len(self.ids) + len(self.observation)


@dataclass
class Segment:
    """One training context: a prompt, then sampled turns and observations."""

    index: int
    prompt_len: int
    """Ids of the prompt (original prompt, or the compacted history)."""
    tokens: list[int]
    """Prompt and everything appended since."""
    loss_mask: list[int] = field(default_factory=list)
    """Over tokens[prompt_len:]: 1 for sampled ids, 0 for observations."""
    logprobs: list[float] = field(default_factory=list)
    """Over tokens[prompt_len:]: sampled log-probs, 0.0 for observations."""
    turns: list[Turn] = field(default_factory=list)
    omitted_turns: int = 0
    """Turns left out of this segment's prompt (0 for the first segment)."""
    kept_turns: int = 0
    """Turns of the history kept in this segment's prompt."""

    @property
    def end(self) -> int:
        """Length up to the end of the last sampled turn (trailing observation excluded)."""
        if not self.turns:
            return self.prompt_len
        last = self.turns[-1]
        return last.start + len(last.ids)


class TokenTrajectory:
    """All segments of one episode; `context` is what the next /generate call gets."""

    def __init__(self, prompt_ids: list[int], header_ids: Sequence[int] | None = None) -> None:
        self.prompt_ids = list(prompt_ids)
        self.header_ids = list(header_ids or [])
        self.segments = [Segment(index=0, prompt_len=len(self.prompt_ids), tokens=list(self.prompt_ids))]
        self.turns: list[Turn] = []

    @property
    def segment(self) -> Segment:
        return self.segments[-1]

    @property
    def context(self) -> list[int]:
        return self.segment.tokens

    def add_turn(
        self, ids: Sequence[int], logprobs: Sequence[float], finish_reason: str, meta: TurnMeta | None = None
    ) -> Turn:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} log-probs")
        seg = self.segment
        turn = Turn(
            index=len(self.turns),
            segment=seg.index,
            start=len(seg.tokens),
            ids=list(ids),
            logprobs=[float(x) for x in logprobs],
            finish_reason=finish_reason,
            meta=meta,
        )
        seg.tokens.extend(turn.ids)
        seg.loss_mask.extend([1] * len(turn.ids))
        seg.logprobs.extend(turn.logprobs)
        seg.turns.append(turn)
        self.turns.append(turn)
        return turn

    def add_observation(self, ids: Sequence[int]) -> None:
        """Ids after the last turn (loss mask 0); they end with the next assistant header."""
        if not self.turns or self.turns[-1].observation:
            raise ValueError("an observation follows exactly one sampled turn")
        if self.header_ids and list(ids[-len(self.header_ids) :]) != self.header_ids:
            raise PrefixError("an observation must end with the assistant header")
        seg = self.segment
        self.turns[-1].observation = list(ids)
        seg.tokens.extend(ids)
        seg.loss_mask.extend([0] * len(ids))
        seg.logprobs.extend([0.0] * len(ids))

    def compact(
        self,
        budget: int,
        marker: Callable[[int], list[int]],
        *,
        head_ratio: float = 0.3,
        tail_ratio: float = 0.7,
        low_water: float = 1.0,
    ) -> bool:
        """Start a segment of prompt + head pairs + marker + tail pairs within ``low_water × budget`` ids
        (hysteresis: the segment then has room for many turns before the next compaction), or, when even
        prompt + marker + newest pair do not fit that, with only those.

        Pairs are (turn, its observation), oldest first; the newest pair is always kept.
        Returns False when even prompt + marker + newest pair exceed the budget.
        """
        pairs = self.turns
        if not pairs or not pairs[-1].observation:
            raise ValueError("compact after an observation, before the next turn")
        # the low-water mark; else prompt + marker + the newest pair alone; else the budget
        least = len(self.prompt_ids) + len(marker(len(pairs))) - len(self.header_ids) + pairs[-1].pair_len
        attempts = [(int(budget * low_water), head_ratio, tail_ratio), (min(budget, least), 0.0, 1.0)]
        kept = None
        for target, head, tail in [*attempts, (budget, head_ratio, tail_ratio)]:
            kept = head_tail_context(
                self.prompt_ids,
                pairs,
                target,
                marker,
                header_len=len(self.header_ids),
                head_ratio=head,
                tail_ratio=tail,
            )
            if kept is not None:
                break
        if kept is None:
            return False
        self.segments.append(
            Segment(
                index=len(self.segments),
                prompt_len=len(kept.tokens),
                tokens=kept.tokens,
                omitted_turns=kept.omitted_turns,
                kept_turns=kept.kept_turns,
            )
        )
        return True

    def summary(self) -> dict[str, Any]:
        """Counts for logs and meta.json."""
        return {
            "turns": len(self.turns),
            "segments": len(self.segments),
            "prompt_tokens": len(self.prompt_ids),
            "sampled_tokens": sum(len(t.ids) for t in self.turns),
            "observation_tokens": sum(len(t.observation) for t in self.turns),
            "segment_prompt_lens": [s.prompt_len for s in self.segments],
            "omitted_turns": [s.omitted_turns for s in self.segments],
        }
