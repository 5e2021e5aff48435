"""Head + tail context: what a compacted segment keeps (swe_rl.tokens.context via TokenTrajectory.compact)."""

from __future__ import annotations

from token_turns import PROBLEM, SYSTEM, assistant, sampled, user

from swe_rl.tokens import TokenTrajectory


def _episode(codec, qwen_tokenizer, n_turns: int, obs_words: int = 40) -> TokenTrajectory:
    traj = TokenTrajectory(codec.prompt_ids([SYSTEM, PROBLEM]), codec.header_ids)
    for i in range(n_turns):
        ids = sampled(qwen_tokenizer, f"step {i}", f"```bash\necho {i}\n```")
        traj.add_turn(ids, [-0.1] * len(ids), "stop")
        traj.add_observation(
            codec.observation_ids(
                assistant(f"step {i}", f"echo {i}"), [user(f"out {i} " + "word " * obs_words)], ids
            )
        )
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
    assert seg.tokens[-last.pair_len :] == last.ids + last.observation
    # the new segment renders like the conversation with the omitted turns replaced by the marker
    n_head = sum(1 for i in range(20) if f"step {i}\n" in head[0])
    kept = [
        m
        for i in list(range(n_head))
        for m in (assistant(f"step {i}", f"```bash\necho {i}\n```"), user(f"out {i} " + "word " * 40))
    ]
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
    assert sum(lens[:n_head]) <= 0.3 * room < sum(lens[: n_head + 1])
    assert sum(lens[-n_tail:]) <= 0.7 * room < sum(lens[-n_tail - 1 :])
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
