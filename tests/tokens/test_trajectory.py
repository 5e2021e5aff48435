"""Token trajectories: the rendered conversation, token for token (swe_rl.tokens.trajectory)."""

from __future__ import annotations

from token_turns import PROBLEM, SYSTEM, assistant, sampled, user

from swe_rl.tokens import TokenTrajectory


def test_trajectory_is_the_rendered_conversation_token_for_token(codec, qwen_tokenizer):
    messages = [SYSTEM, PROBLEM]
    traj = TokenTrajectory(codec.prompt_ids(messages), codec.header_ids)
    turns = [
        ("find it", "```bash\ngrep -n interleave toolz/*.py\n```"),
        ("fix it", "```bash\nsed -i s/a/b/ x\n```"),
    ]
    observations = [
        "<returncode>0</returncode>\n<output>\n12: def interleave\n</output>",
        "<returncode>0</returncode>",
    ]
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
        assert seg.tokens[turn.start : turn.start + len(turn.ids)] == turn.ids
        assert seg.loss_mask[off : off + len(turn.ids)] == [1] * len(turn.ids)
        obs = slice(off + len(turn.ids), off + turn.pair_len)
        assert set(seg.loss_mask[obs]) == {0} and set(seg.logprobs[obs]) == {0.0}
    assert traj.turns[0].observation[:4] == codec.encode("\n<|im_start|>user\n")


def test_a_turn_cut_at_the_length_limit_is_closed_by_the_observation(codec, qwen_tokenizer):
    traj = TokenTrajectory(codec.prompt_ids([SYSTEM, PROBLEM]), codec.header_ids)
    cut = qwen_tokenizer.encode(
        "<think>\nthis goes on and on", add_special_tokens=False
    )  # no </think>, no <|im_end|>
    traj.add_turn(cut, [-1.0] * len(cut), "length")
    obs = codec.observation_ids(
        {"role": "assistant", "content": "this goes on and on"}, [user("cut off")], cut
    )
    assert codec.decode(obs) == "<|im_end|>\n<|im_start|>user\ncut off<|im_end|>\n<|im_start|>assistant\n"
    traj.add_observation(obs)
    assert codec.prefix_breaks == 0


def _played(pairs: int, turn: int, obs: int) -> TokenTrajectory:
    """A trajectory of plain ids: a 100-id prompt, ``pairs`` turns of ``turn`` ids and observations of ``obs``."""
    header = [7, 8, 9]
    traj = TokenTrajectory(list(range(100)), header)
    for _ in range(pairs):
        traj.add_turn([1] * turn, [-0.1] * turn, "stop")
        traj.add_observation([2] * (obs - len(header)) + header)
    return traj


def _marker(n: int) -> list[int]:
    return [5] * 10 + [7, 8, 9]


def test_compaction_refills_only_to_the_low_water_mark():
    traj = _played(20, 40, 60)  # 100 + 20 × 100 ids
    assert traj.compact(1000, _marker, low_water=0.4)
    seg = traj.segment
    assert seg.prompt_len == len(seg.tokens) <= 400 and seg.omitted_turns > 0
    refilled = _played(20, 40, 60)
    assert refilled.compact(1000, _marker)  # low_water 1.0: as full as the budget allows
    assert len(refilled.context) > 900


def test_below_the_low_water_mark_only_prompt_marker_and_newest_pair_are_kept():
    traj = _played(20, 40, 60)
    assert traj.compact(1000, _marker, low_water=0.1)  # 100 ids cannot hold the 100-id prompt
    assert len(traj.context) == 100 + 10 + 100 and traj.segment.kept_turns == 1
    assert traj.context[-100:] == traj.turns[-1].ids + traj.turns[-1].observation
    assert not _played(3, 40, 900).compact(1000, _marker, low_water=0.1)  # the newest pair alone is too big
