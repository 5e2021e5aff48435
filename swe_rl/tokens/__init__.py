"""Tokens: token-exact accounting of multi-turn episodes for training.

- `codec`: `ChatCodec` renders and tokenizes the pieces of a conversation with the chat template
  (`ChatRenderer`), checked to be what tokenizing the whole conversation would give.
- `template_check`: our chat template against the tokenizer's own (refused where the tokens would change).
- `trajectory`: `TokenTrajectory`, the sampled ids, log-probs and loss masks of an episode, per segment.
- `replay`: what each SGLang answer carries for slime beyond ids (routed experts, top-p ids, counts).
- `context`: head + tail context management (what a compacted segment keeps).
- `qwen_tokenizer`: a real Qwen tokenizer built offline, for tests and benchmarks.

The names most callers need are importable from here.
"""

from swe_rl.tokens.codec import (
    ChatCodec,
    ChatRenderer,
    PrefixError,
    Tokenizer,
    load_tokenizer,
    split_thinking,
)
from swe_rl.tokens.trajectory import Segment, TokenTrajectory, Turn

__all__ = [
    "ChatCodec",
    "ChatRenderer",
    "PrefixError",
    "Segment",
    "TokenTrajectory",
    "Tokenizer",
    "Turn",
    "load_tokenizer",
    "split_thinking",
]
