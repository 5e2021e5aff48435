"""Token accounting with the real Qwen tokenizer and the thinking-preserving chat template."""

from __future__ import annotations

import pytest
from token_fixtures import codec, qwen_tokenizer, qwen_tokenizer_dir, renderer  # noqa: F401

from swe_rl.tokens import PrefixError, TokenTrajectory, split_thinking

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


def test_tokenizer_has_qwen_ids(qwen_tokenizer):
    enc = lambda s: qwen_tokenizer.encode(s, add_special_tokens=False)
    assert enc("<|im_start|><|im_end|><think></think><tool_call>") == [IM_START, IM_END, THINK, END_THINK, TOOL_CALL]
    assert enc("<|im_start|>assistant\n") == [IM_START, 77091, 198]
    assert qwen_tokenizer.eos_token_id == IM_END
    assert qwen_tokenizer.decode(enc("naïve café ```bash\nls -la\n```")) == "naïve café ```bash\nls -la\n```"


def test_template_keeps_every_turns_thinking_and_only_appends(qwen_tokenizer, renderer):
    messages = [SYSTEM, PROBLEM, assistant("look first", "ls"), user("a.py"),
                {"role": "assistant", "content": "<think>\nread it\n</think>\n\ncat a.py"}, user("x = 1")]
    text = renderer.render(messages, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a shell agent.<|im_end|>\n"
                    "<|im_start|>user\nFix the bug in toolz.interleave.<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nlook first\n</think>\n\nls<|im_end|>\n"
                    "<|im_start|>user\na.py<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nread it\n</think>\n\ncat a.py<|im_end|>\n"
                    "<|im_start|>user\nx = 1<|im_end|>\n<|im_start|>assistant\n")
    # transformers renders the same template (what SGLang does with --chat-template) identically
    assert qwen_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == text
    for n in range(1, len(messages)):
        assert text.startswith(renderer.render(messages[:n]))
    assert renderer.render([user("q")], add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_split_thinking():
    assert split_thinking("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_thinking("plan opened by the template\n</think>\n\nanswer") == ("plan opened by the template", "answer")
    assert split_thinking("no thinking") == (None, "no thinking")


def test_trajectory_is_the_rendered_conversation_token_for_token(codec, qwen_tokenizer):
    messages = [SYSTEM, PROBLEM]
    traj = TokenTrajectory(codec.prompt_ids(messages), codec.header_ids)
    turns = [("find it", "```bash\ngrep -n interleave toolz/*.py\n```"), ("fix it", "```bash\nsed -i s/a/b/ x\n```")]
    observations = ["<returncode>0</returncode>\n<output>\n12: def interleave\n</output>", "<returncode>0</returncode>"]
    for (reasoning, content), obs in zip(turns, observations):
        ids = sampled(qwen_tokenizer, reasoning, content)
        traj.add_turn(ids, [-0.5] * len(ids), "stop")
        messages.append(assistant(reasoning, content))
        new = [user(obs)]
        traj.add_observation(codec.observation_ids(messages[-1], new, ids))
        messages.extend(new)
    # the context is exactly the tokenization of the whole rendered conversation
    rendered = codec.render(messages, add_generation_prompt=True)
    assert traj.context == codec.encode(rendered)
    assert qwen_tokenizer.decode(traj.context) == rendered
    assert codec.prefix_breaks == 0
    seg = traj.segment
    assert len(seg.loss_mask) == len(seg.logprobs) == len(seg.tokens) - seg.prompt_len
    # sampled ids appear verbatim with mask 1; observations have mask 0 and log-prob 0
    for turn in traj.turns:
        off = turn.start - seg.prompt_len
        assert seg.tokens[turn.start:turn.start + len(turn.ids)] == turn.ids
        assert seg.loss_mask[off:off + len(turn.ids)] == [1] * len(turn.ids)
        obs = slice(off + len(turn.ids), off + turn.pair_len)
        assert set(seg.loss_mask[obs]) == {0} and set(seg.logprobs[obs]) == {0.0}
    assert traj.turns[0].observation[:4] == codec.encode("\n<|im_start|>user\n")


def test_a_turn_cut_at_the_length_limit_is_closed_by_the_observation(codec, qwen_tokenizer):
    traj = TokenTrajectory(codec.prompt_ids([SYSTEM, PROBLEM]), codec.header_ids)
    cut = qwen_tokenizer.encode("<think>\nthis goes on and on", add_special_tokens=False)  # no </think>, no <|im_end|>
    traj.add_turn(cut, [-1.0] * len(cut), "length")
    obs = codec.observation_ids({"role": "assistant", "content": "this goes on and on"}, [user("cut off")], cut)
    assert codec.decode(obs) == "<|im_end|>\n<|im_start|>user\ncut off<|im_end|>\n<|im_start|>assistant\n"
    traj.add_observation(obs)
    assert codec.prefix_breaks == 0


def test_observation_boundary_check_counts_unstable_joins(codec, qwen_tokenizer):
    # a turn that ended in the middle of a word, followed by text that BPE would merge with it
    last = qwen_tokenizer.encode("hel", add_special_tokens=False)
    ids = codec.encode("lo")
    assert not codec._boundary_is_stable(last, "lo", ids)
    assert codec._boundary_is_stable([IM_END], "\n<|im_start|>user", codec.encode("\n<|im_start|>user"))


def test_template_that_rewrites_history_is_refused(qwen_tokenizer):
    from swe_rl.tokens import ChatCodec, ChatRenderer

    # a stock-Qwen-like template: thinking is dropped from turns once another message follows
    dropping = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and not loop.last %}"
                "{{ m.content }}{% else %}{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n"
                "{% endif %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    codec = ChatCodec(qwen_tokenizer, ChatRenderer(dropping))
    with pytest.raises(PrefixError):
        codec.observation_ids(assistant("secret plan", "ls"), [user("out")], [IM_END])


# --------------------------------------------------------------------------- context management


def _episode(codec, qwen_tokenizer, n_turns: int, obs_words: int = 40) -> TokenTrajectory:
    traj = TokenTrajectory(codec.prompt_ids([SYSTEM, PROBLEM]), codec.header_ids)
    for i in range(n_turns):
        ids = sampled(qwen_tokenizer, f"step {i}", f"```bash\necho {i}\n```")
        traj.add_turn(ids, [-0.1] * len(ids), "stop")
        traj.add_observation(codec.observation_ids(assistant(f"step {i}", f"echo {i}"),
                                                   [user(f"out {i} " + "word " * obs_words)], ids))
    return traj


def marker(codec):
    return lambda n: codec.marker_ids(f"[... {n} earlier turn(s) omitted ...]")


def test_compact_keeps_head_and_tail_pairs_around_a_marker(codec, qwen_tokenizer):
    traj = _episode(codec, qwen_tokenizer, 20)
    pair = traj.turns[0].pair_len
    budget = len(traj.prompt_ids) + 10 * pair
    assert len(traj.context) > budget
    assert traj.compact(budget, marker(codec), head_ratio=0.3, tail_ratio=0.7)
    seg = traj.segment
    assert seg.index == 1 and seg.prompt_len == len(seg.tokens) <= budget
    assert seg.kept_turns + seg.omitted_turns == 20 and seg.omitted_turns > 0
    text = codec.decode(seg.tokens)
    # head: the first turns, then the marker, then the newest turns; the context ends with the header
    assert text.startswith(codec.decode(traj.prompt_ids)[: -len("<|im_start|>assistant\n")])
    head = text.split(f"[... {seg.omitted_turns} earlier turn(s) omitted ...]")
    assert len(head) == 2 and "step 0" in head[0] and "step 19" in head[1]
    assert f"step {20 - 1 - 0}" in head[1] and "step 10" not in text
    assert text.endswith("out 19 " + "word " * 40 + "<|im_end|>\n<|im_start|>assistant\n")
    # the kept pairs are the ids the model saw, verbatim
    last = traj.turns[-1]
    assert seg.tokens[-last.pair_len:] == last.ids + last.observation
    # the new segment renders like the conversation with the omitted turns replaced by the marker
    n_head = sum(1 for i in range(20) if f"step {i}\n" in head[0])
    kept = [m for i in list(range(n_head)) for m in (assistant(f"step {i}", f"```bash\necho {i}\n```"),
                                                     user(f"out {i} " + "word " * 40))]
    assert text.startswith(codec.render([SYSTEM, PROBLEM, *kept]))


def test_compact_budget_split_follows_the_ratios(codec, qwen_tokenizer):
    traj = _episode(codec, qwen_tokenizer, 40)
    pair = traj.turns[0].pair_len
    budget = len(traj.prompt_ids) + 20 * pair + 40
    assert traj.compact(budget, marker(codec), head_ratio=0.3, tail_ratio=0.7)
    seg = traj.segment
    n_head = _head_count(codec, seg)
    n_tail = seg.kept_turns - n_head
    room = budget - len(traj.prompt_ids) - len(marker(codec)(40)) + len(codec.header_ids)
    lens = [t.pair_len for t in traj.turns]
    # each side takes as many whole pairs as fit its share of the room, and not one more
    assert sum(lens[:n_head]) <= 0.3 * room < sum(lens[:n_head + 1])
    assert sum(lens[-n_tail:]) <= 0.7 * room < sum(lens[-n_tail - 1:])
    assert (n_head, n_tail) in ((6, 13), (6, 14))


def _head_count(codec, seg) -> int:
    head = codec.decode(seg.tokens).split("earlier turn(s) omitted")[0]
    return head.count("<think>")


def test_compact_fails_when_the_newest_pair_alone_does_not_fit(codec, qwen_tokenizer):
    traj = _episode(codec, qwen_tokenizer, 3, obs_words=400)
    assert not traj.compact(len(traj.prompt_ids) + 50, marker(codec))
    assert len(traj.segments) == 1


def test_compact_without_omission_needs_no_marker(codec, qwen_tokenizer):
    traj = _episode(codec, qwen_tokenizer, 2)
    assert traj.compact(len(traj.context) + 20, marker(codec), head_ratio=0.5, tail_ratio=0.5)
    assert traj.segment.omitted_turns == 0 and traj.segment.tokens == traj.segments[0].tokens
