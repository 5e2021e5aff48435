"""The chat codec with the real Qwen tokenizer and the thinking-preserving template (swe_rl.tokens.codec)."""

from __future__ import annotations

import pytest
from token_turns import END_THINK, IM_END, IM_START, PROBLEM, SYSTEM, THINK, TOOL_CALL, assistant, user

from swe_rl.tokens import PrefixError, split_thinking


def test_tokenizer_has_qwen_ids(qwen_tokenizer):
    def enc(s):
        return qwen_tokenizer.encode(s, add_special_tokens=False)

    assert enc("<|im_start|><|im_end|><think></think><tool_call>") == [
        IM_START,
        IM_END,
        THINK,
        END_THINK,
        TOOL_CALL,
    ]
    assert enc("<|im_start|>assistant\n") == [IM_START, 77091, 198]
    assert qwen_tokenizer.eos_token_id == IM_END
    assert qwen_tokenizer.decode(enc("naïve café ```bash\nls -la\n```")) == "naïve café ```bash\nls -la\n```"


def test_template_keeps_every_turns_thinking_and_only_appends(qwen_tokenizer, renderer):
    messages = [
        SYSTEM,
        PROBLEM,
        assistant("look first", "ls"),
        user("a.py"),
        {"role": "assistant", "content": "<think>\nread it\n</think>\n\ncat a.py"},
        user("x = 1"),
    ]
    text = renderer.render(messages, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a shell agent.<|im_end|>\n"
        "<|im_start|>user\nFix the bug in toolz.interleave.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nlook first\n</think>\n\nls<|im_end|>\n"
        "<|im_start|>user\na.py<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nread it\n</think>\n\ncat a.py<|im_end|>\n"
        "<|im_start|>user\nx = 1<|im_end|>\n<|im_start|>assistant\n"
    )
    # transformers renders the same template (what SGLang does with --chat-template) identically
    assert qwen_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == text
    for n in range(1, len(messages)):
        assert text.startswith(renderer.render(messages[:n]))
    assert renderer.render([user("q")], add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_split_thinking():
    assert split_thinking("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_thinking("plan opened by the template\n</think>\n\nanswer") == (
        "plan opened by the template",
        "answer",
    )
    assert split_thinking("no thinking") == (None, "no thinking")


def test_observation_boundary_check_counts_unstable_joins(codec, qwen_tokenizer):
    # a turn that ended in the middle of a word, followed by text that BPE would merge with it
    last = qwen_tokenizer.encode("hel", add_special_tokens=False)
    ids = codec.encode("lo")
    assert not codec._boundary_is_stable(last, "lo", ids)
    assert codec._boundary_is_stable([IM_END], "\n<|im_start|>user", codec.encode("\n<|im_start|>user"))


def test_template_that_rewrites_history_is_refused(qwen_tokenizer):
    from swe_rl.tokens import ChatCodec, ChatRenderer

    # a stock-Qwen-like template: thinking is dropped from turns once another message follows
    dropping = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and not loop.last %}"
        "{{ m.content }}{% else %}{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n"
        "{% endif %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    codec = ChatCodec(qwen_tokenizer, ChatRenderer(dropping))
    with pytest.raises(PrefixError):
        codec.observation_ids(assistant("secret plan", "ls"), [user("out")], [IM_END])
