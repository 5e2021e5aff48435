"""Token trajectories: the rendered conversation, token for token (swe_rl.tokens.trajectory)."""

from __future__ import annotations

from token_fixtures import codec, qwen_tokenizer, qwen_tokenizer_dir, renderer  # noqa: F401
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
