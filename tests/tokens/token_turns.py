"""Messages and sampled turns of a small shell-agent conversation, for the tests of swe_rl.tokens."""

from __future__ import annotations

IM_START, IM_END, THINK, END_THINK, TOOL_CALL = 151644, 151645, 151667, 151668, 151657

SYSTEM = {"role": "system", "content": "You are a shell agent."}
PROBLEM = {"role": "user", "content": "Fix the bug in toolz.interleave."}


def assistant(reasoning: str, content: str) -> dict:
    return {"role": "assistant", "content": content, "reasoning_content": reasoning}


def user(content: str) -> dict:
    return {"role": "user", "content": content}


def sampled(tok, reasoning: str, content: str) -> list[int]:
    """What a Qwen3 thinking model samples for a turn: think block, answer, <|im_end|>."""
    return tok.encode(f"<think>\n{reasoning}\n</think>\n\n{content}", add_special_tokens=False) + [IM_END]
