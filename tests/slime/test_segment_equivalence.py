"""A segment sample trains exactly what the per-turn samples trained, proven on a real network through slime.

A tiny randomly initialised causal LM (a `transformers` Qwen3 config, no download) scores two played
multi-turn trajectories (real Qwen ids, compactions to the low-water mark). Their samples go through the
pinned slime's own code (`tests/upstream_slime.py`): `RolloutManager._convert_samples_to_train_data` with
our reward post-process, `tensorize_rollout_data_for_training`, `compute_advantages_and_returns` (grpo)
and `loss_function` (policy loss, per-rollout denominators). Per-token log-probs of every trained token and
the gradient of every weight are the same for ``swe_samples: segment`` and ``turn``, with slime's default
per-rollout token mean and with ``--calculate-per-token-loss``.
"""

from __future__ import annotations

import functools
from argparse import Namespace
from typing import Any

import pytest
from token_fixtures import codec, qwen_tokenizer, qwen_tokenizer_dir, renderer  # noqa: F401
from upstream_slime import upstream_slime  # noqa: F401

from swe_rl.slime.post_process import post_process_rewards
from swe_rl.slime.samples import trajectory_samples
from swe_rl.tokens import TokenTrajectory

pytestmark = pytest.mark.slow  # a forward and backward of a small network per sample: seconds each
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SYSTEM = {"role": "system", "content": "You are a shell agent."}
PROBLEM = {"role": "user", "content": "Fix the bug in toolz.interleave."}
BUDGET_OVER_PROMPT = 480
"""Room of the context beyond the prompt: a few turns, so each trajectory compacts more than once."""
VOCAB = 4096
"""The tiny model's vocabulary: a Qwen id ``t`` is its token ``t % VOCAB`` (logits over Qwen's 151k ids
would cost gigabytes for nothing the test is about)."""


def tiny_lm(vocab: int = VOCAB) -> Any:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model.float().eval()


def token_logprobs(model: Any, context: list[int], ids: list[int]) -> list[float]:
    """What the rollout engine reports for ``ids`` sampled after ``context``."""
    with torch.no_grad():
        logits = model(torch.tensor([[t % VOCAB for t in context + ids]])).logits[0].float()
    logp = torch.log_softmax(logits[len(context) - 1 : -1], dim=-1)
    return logp[torch.arange(len(ids)), torch.tensor([t % VOCAB for t in ids])].tolist()


def play(model: Any, codec: Any, tokenizer: Any, turns: int, seed: int) -> TokenTrajectory:
    """A trajectory of ``turns`` agent turns whose observations overflow the context: compacted to 60%."""
    messages = [SYSTEM, PROBLEM]
    traj = TokenTrajectory(codec.prompt_ids(messages), codec.header_ids)
    budget = len(traj.prompt_ids) + BUDGET_OVER_PROMPT
    for i in range(turns):
        reasoning, content = (
            f"step {i} of run {seed}",
            f"```bash\nsed -n {i},{i + 9}p toolz/itertoolz.py\n```",
        )
        ids = tokenizer.encode(f"<think>\n{reasoning}\n</think>\n\n{content}", add_special_tokens=False)
        ids.append(codec.encode(codec.turn_end)[0])
        traj.add_turn(ids, token_logprobs(model, traj.context, ids), "stop")
        messages.append({"role": "assistant", "content": content, "reasoning_content": reasoning})
        new = [
            {"role": "user", "content": "\n".join(f"{n}: line {n} of run {seed}" for n in range(i, i + 9))}
        ]
        traj.add_observation(codec.observation_ids(messages[-1], new, ids))
        messages.extend(new)
        if len(traj.context) > budget:
            assert traj.compact(budget, lambda n: codec.marker_ids(f"[{n} turns omitted]"), low_water=0.6)
    return traj


def slime_args(per_token: bool) -> Namespace:
    return Namespace(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=2,
        rollout_batch_size=1,
        reward_key="score",
        kl_coef=0.0,
        use_rollout_logprobs=True,
        custom_advantage_function_path=None,
        use_opd=False,
        normalize_advantages=False,
        loss_type="policy_loss",
        calculate_per_token_loss=per_token,
        recompute_loss_function=False,
        allgather_cp=False,
        log_probs_chunk_size=-1,
        entropy_coef=0.0,
        use_opsm=False,
        eps_clip=0.2,
        eps_clip_high=0.28,
        eps_clip_c=None,
        get_mismatch_metrics=False,
        use_tis=False,
        use_kl_loss=False,
        custom_pg_loss_reducer_function_path=None,
        rollout_top_p=1.0,
        rollout_temperature=1.0,
    )


def train_data(import_module: Any, args: Namespace, samples: list[Any]) -> dict[str, Any]:
    """slime's conversion of the flattened rollout (our post-process as its reward post-process), tensorized."""
    rollout = import_module("slime.ray.rollout")
    manager = Namespace(
        args=args,
        custom_convert_samples_to_train_data_func=None,
        custom_reward_post_process_func=post_process_rewards,
    )
    manager._post_process_rewards = functools.partial(rollout.RolloutManager._post_process_rewards, manager)
    data = rollout.RolloutManager._convert_samples_to_train_data(manager, samples)
    data["total_lengths"] = [len(t) for t in data["tokens"]]
    keep = (
        "tokens",
        "response_lengths",
        "rewards",
        "loss_masks",
        "rollout_ids",
        "rollout_mask_sums",
        "rollout_log_probs",
        "total_lengths",
    )
    data = {k: data[k] for k in keep}
    import_module("slime.observability.rollout_data_utils").tensorize_rollout_data_for_training(data)
    return data


def loss_and_grads(import_module: Any, model: Any, args: Namespace, samples: list[Any]) -> tuple[Any, ...]:
    loss_module = import_module("slime.backends.megatron_utils.loss")
    data = train_data(import_module, args, samples)
    loss_module.compute_advantages_and_returns(args, data)
    model.zero_grad()
    logits = torch.cat(
        [model(t.unsqueeze(0)).logits.float() for t in data["tokens"]], dim=1
    )  # packed [1, T, V]
    batch = {**data, "unconcat_tokens": data["tokens"]}
    _, per_token = loss_module.get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
    )
    trained = torch.cat([lp[m.bool()] for lp, m in zip(per_token["log_probs"], data["loss_masks"])]).detach()
    loss, normalizer, _ = loss_module.loss_function(args, batch, 1, 2, logits)  # 2 rollouts in the step
    (loss / normalizer).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return trained, (loss / normalizer).detach(), grads, data


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """slime compiles a few helpers with torch.compile; eager runs the same code without minutes of compiling."""
    monkeypatch.setattr(torch._dynamo.config, "disable", True)


@pytest.mark.parametrize("per_token", [False, True], ids=["per-rollout-mean", "per-token-loss"])
def test_segment_samples_train_exactly_what_turn_samples_trained(
    upstream_slime, codec, qwen_tokenizer, per_token
):
    Sample = upstream_slime("slime.utils.types").Sample
    model = tiny_lm()
    played = [
        (play(model, codec, qwen_tokenizer, 7, seed=0), 1.0),
        (play(model, codec, qwen_tokenizer, 5, seed=1), -1.0),
    ]
    shapes = [[len(s.turns) for s in traj.segments] for traj, _ in played]
    assert all(len([n for n in shape if n]) >= 2 and max(shape) >= 2 for shape in shapes), shapes
    with torch.no_grad():  # the trainer's weights moved since the rollout: ratios are not 1, clipping is live
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))

    def samples_of(mode: str) -> list[Any]:
        out = []
        for index, (traj, score) in enumerate(played):
            parent = Sample(group_index=0, index=index, metadata={})
            for s in trajectory_samples(Sample, parent, traj, codec, {}, mode=mode):
                s.reward = {"score": score}
                s.tokens = [t % VOCAB for t in s.tokens]  # the tiny model's ids
                out.append(s)
        return out

    turn, segment = samples_of("turn"), samples_of("segment")
    assert len(turn) == 12 and len(segment) == sum(1 for shape in shapes for n in shape if n) < len(turn)
    assert sum(len(s.tokens) for s in segment) < sum(len(s.tokens) for s in turn)
    args = slime_args(per_token)
    lp_turn, loss_turn, grad_turn, data_turn = loss_and_grads(upstream_slime, model, args, turn)
    lp_seg, loss_seg, grad_seg, data_seg = loss_and_grads(upstream_slime, model, args, segment)
    # every trained token, the same log-prob on its per-turn context as inside its whole segment
    assert lp_turn.shape == lp_seg.shape and torch.allclose(lp_turn, lp_seg, atol=1e-5)
    # one advantage per trajectory either way (+0.707 / -0.707), the same per-rollout denominators
    assert sorted({round(r, 3) for r in data_seg["rewards"]}) == [-0.707, 0.707]
    totals = {int(r): float(t) for r, t in zip(data_seg["rollout_ids"], data_seg["rollout_mask_sums"])}
    assert totals == {
        int(r): float(t) for r, t in zip(data_turn["rollout_ids"], data_turn["rollout_mask_sums"])
    }
    # the same loss and the same gradient of every weight
    assert grad_turn.abs().max() > 1e-4  # a real gradient, not zero
    assert torch.allclose(loss_turn, loss_seg, rtol=1e-5, atol=1e-7)
    assert torch.allclose(grad_turn, grad_seg, rtol=1e-4, atol=1e-7)


def test_the_pinned_slime_trains_one_advantage_per_sample_so_prm_runs_keep_turn_samples(
    upstream_slime, codec, qwen_tokenizer
):
    """PRM step bonuses differ per turn; slime's train data carries one reward per sample (a float through
    `_convert_samples_to_train_data`, the train-side keys of `_split_train_data_by_dp` have no per-token
    slot) and `compute_advantages_and_returns` (grpo, `get_grpo_returns`) spreads it over every token."""
    from swe_rl.slime import runtime
    from swe_rl.slime.config import PluginConfig

    Sample = upstream_slime("slime.utils.types").Sample
    loss_module = upstream_slime("slime.backends.megatron_utils.loss")
    model = tiny_lm()
    traj = play(model, codec, qwen_tokenizer, 7, seed=2)
    args = slime_args(False)
    samples = []
    for index, score in ((0, 1.0), (1, -1.0)):
        parent = Sample(group_index=0, index=index, metadata={})
        for s in trajectory_samples(Sample, parent, traj, codec, {}, mode="segment"):
            s.reward = {"score": score}
            s.tokens = [t % VOCAB for t in s.tokens]
            samples.append(s)
    data = train_data(upstream_slime, args, samples)
    loss_module.compute_advantages_and_returns(args, data)
    for advantage, mask, reward in zip(data["advantages"], data["loss_masks"], data["rewards"]):
        trained = advantage[mask.bool()]
        assert trained.numel() > 1 and torch.all(trained == reward)  # every turn of the segment: one value
    prm = PluginConfig.from_sources(None, env={"SWE_PRM_ENABLE": "1", "SWE_PRM_URL": "http://judge:30010/v1"})
    assert prm.samples == "segment" and runtime.sample_mode(prm, evaluation=False) == "turn"
