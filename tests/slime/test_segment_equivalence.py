"""A segment sample trains exactly what the per-turn samples trained, proven on a real network.

A tiny randomly initialised causal LM (a `transformers` Qwen3 config, no download) scores two played
multi-turn trajectories (real Qwen ids, compactions to the low-water mark). Their samples go through slime's
train-data conversion with our reward post-process, grpo advantages and the policy loss with per-rollout
denominators — twice: through the restatement of the pinned slime in tests/upstream_loss.py (always, so CI
checks it) and through the pinned slime's own code (`tests/upstream_slime.py`:
`RolloutManager._convert_samples_to_train_data`, `tensorize_rollout_data_for_training`,
`compute_advantages_and_returns`, `get_log_probs_and_entropy`, `loss_function`) when its source is here.
Per-token log-probs of every trained token and the gradient of every weight are the same for
``swe_samples: segment`` and ``turn``, with slime's default per-rollout token mean and with
``--calculate-per-token-loss``. With slime here, the restatement and slime give the same numbers on the same
input (so the restatement cannot drift from the pin).
"""

from __future__ import annotations

import dataclasses
import functools
from argparse import Namespace
from typing import Any

import pytest
from upstream_rewards import upstream_post_process

from swe_rl.slime.post_process import post_process_rewards
from swe_rl.slime.samples import CompatSample, trajectory_samples
from swe_rl.tokens import TokenTrajectory

pytestmark = pytest.mark.slow  # a forward and backward of a small network per sample: seconds each
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
upstream_loss = pytest.importorskip("upstream_loss")  # needs torch

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


class Restated:
    """slime's training path as restated in tests/upstream_loss.py: no slime needed."""

    Sample: Any = CompatSample

    def train_data(
        self, args: Namespace, samples: list[Any], post_process: Any = post_process_rewards
    ) -> Any:
        return upstream_loss.train_data(args, samples, post_process)

    def advantages(self, args: Namespace, data: dict[str, Any]) -> None:
        upstream_loss.grpo_advantages(args, data)

    def log_probs(self, args: Namespace, logits: Any, data: dict[str, Any]) -> list[Any]:
        return upstream_loss.response_log_probs(
            logits, data["tokens"], data["total_lengths"], data["response_lengths"]
        )[0]

    def loss(self, args: Namespace, batch: dict[str, Any], logits: Any) -> tuple[Any, Any]:
        return upstream_loss.loss_function(args, batch, 1, 2, logits)  # 2 rollouts in the step


class Upstream:
    """The pinned slime's own functions (`upstream_slime`)."""

    def __init__(self, import_module: Any) -> None:
        self.rollout = import_module("slime.ray.rollout")
        self.tensorize = import_module(
            "slime.observability.rollout_data_utils"
        ).tensorize_rollout_data_for_training
        self.loss_module = import_module("slime.backends.megatron_utils.loss")
        self.Sample = import_module("slime.utils.types").Sample

    def train_data(
        self, args: Namespace, samples: list[Any], post_process: Any = post_process_rewards
    ) -> Any:
        """slime's conversion of the flattened rollout (``post_process`` as its reward post-process; None:
        slime's default), tensorized, with the keys the loss reads."""
        manager = Namespace(
            args=args,
            custom_convert_samples_to_train_data_func=None,
            custom_reward_post_process_func=post_process,
        )
        manager._post_process_rewards = functools.partial(
            self.rollout.RolloutManager._post_process_rewards, manager
        )
        data = self.rollout.RolloutManager._convert_samples_to_train_data(manager, samples)
        data["total_lengths"] = [len(t) for t in data["tokens"]]
        data = {k: data[k] for k in TRAIN_KEYS}
        self.tensorize(data)
        return data

    def advantages(self, args: Namespace, data: dict[str, Any]) -> None:
        self.loss_module.compute_advantages_and_returns(args, data)

    def log_probs(self, args: Namespace, logits: Any, data: dict[str, Any]) -> list[Any]:
        _, out = self.loss_module.get_log_probs_and_entropy(
            logits,
            args=args,
            unconcat_tokens=data["tokens"],
            total_lengths=data["total_lengths"],
            response_lengths=data["response_lengths"],
        )
        return out["log_probs"]

    def loss(self, args: Namespace, batch: dict[str, Any], logits: Any) -> tuple[Any, Any]:
        loss, normalizer, _ = self.loss_module.loss_function(
            args, batch, 1, 2, logits
        )  # 2 rollouts in the step
        return loss, normalizer


TRAIN_KEYS = (
    "tokens",
    "response_lengths",
    "rewards",
    "loss_masks",
    "rollout_ids",
    "rollout_mask_sums",
    "rollout_log_probs",
    "total_lengths",
)


@pytest.fixture(params=["restated", "slime"])
def trainer(request) -> Any:
    """slime's training path: restated (always) and the pinned slime's own (skipped without its source)."""
    if request.param == "restated":
        return Restated()
    return Upstream(request.getfixturevalue("upstream_slime"))


def packed_logits(model: Any, data: dict[str, Any]) -> Any:
    """The model's logits over the packed micro-batch ``[1, T, V]`` (each sample attends to itself only)."""
    return torch.cat([model(t.unsqueeze(0)).logits.float() for t in data["tokens"]], dim=1)


def loss_and_grads(trainer: Any, model: Any, args: Namespace, samples: list[Any]) -> tuple[Any, ...]:
    data = trainer.train_data(args, samples)
    trainer.advantages(args, data)
    model.zero_grad()
    logits = packed_logits(model, data)
    batch = {**data, "unconcat_tokens": data["tokens"]}
    per_sample = trainer.log_probs(args, logits, data)
    trained = torch.cat([lp[m.bool()] for lp, m in zip(per_sample, data["loss_masks"])]).detach()
    loss, normalizer = trainer.loss(args, batch, logits)
    (loss / normalizer).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return trained, (loss / normalizer).detach(), grads, data


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """slime compiles a few helpers with torch.compile; eager runs the same code without minutes of compiling."""
    monkeypatch.setattr(torch._dynamo.config, "disable", True)


def played_pair(model: Any, codec: Any, tokenizer: Any) -> list[tuple[TokenTrajectory, float]]:
    """Two trajectories of one prompt (7 and 5 turns, each compacted at least once), rewards +1 / -1."""
    played = [
        (play(model, codec, tokenizer, 7, seed=0), 1.0),
        (play(model, codec, tokenizer, 5, seed=1), -1.0),
    ]
    shapes = [[len(s.turns) for s in traj.segments] for traj, _ in played]
    assert all(len([n for n in shape if n]) >= 2 and max(shape) >= 2 for shape in shapes), shapes
    return played


def samples_of(Sample: Any, codec: Any, played: list[tuple[TokenTrajectory, float]], mode: str) -> list[Any]:
    out = []
    for index, (traj, score) in enumerate(played):
        parent = Sample(group_index=0, index=index, metadata={})
        for s in trajectory_samples(Sample, parent, traj, codec, {}, mode=mode):
            s.reward = {"score": score}
            s.tokens = [t % VOCAB for t in s.tokens]  # the tiny model's ids
            out.append(s)
    return out


def moved(model: Any) -> Any:
    """The trainer's weights moved since the rollout: ratios are not 1, clipping is live."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("per_token", [False, True], ids=["per-rollout-mean", "per-token-loss"])
def test_segment_samples_train_exactly_what_turn_samples_trained(trainer, codec, qwen_tokenizer, per_token):
    model = tiny_lm()
    played = played_pair(model, codec, qwen_tokenizer)
    moved(model)
    turn, segment = (
        samples_of(trainer.Sample, codec, played, "turn"),
        samples_of(trainer.Sample, codec, played, "segment"),
    )
    segments = sum(1 for traj, _ in played for seg in traj.segments if seg.turns)
    assert len(turn) == 12 and len(segment) == segments < len(turn)
    assert sum(len(s.tokens) for s in segment) < sum(len(s.tokens) for s in turn)
    args = slime_args(per_token)
    lp_turn, loss_turn, grad_turn, data_turn = loss_and_grads(trainer, model, args, turn)
    lp_seg, loss_seg, grad_seg, data_seg = loss_and_grads(trainer, model, args, segment)
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
    trainer, codec, qwen_tokenizer
):
    """PRM step bonuses differ per turn; slime's train data carries one reward per sample (a float through
    `_convert_samples_to_train_data`, the train-side keys of `_split_train_data_by_dp` have no per-token
    slot) and `compute_advantages_and_returns` (grpo, `get_grpo_returns`) spreads it over every token."""
    from swe_rl.slime import runtime
    from swe_rl.slime.config import PluginConfig

    traj = play(tiny_lm(), codec, qwen_tokenizer, 7, seed=2)
    args = slime_args(False)
    samples = samples_of(trainer.Sample, codec, [(traj, 1.0), (traj, -1.0)], "segment")
    data = trainer.train_data(args, samples)
    trainer.advantages(args, data)
    for advantage, mask, reward in zip(data["advantages"], data["loss_masks"], data["rewards"]):
        trained = advantage[mask.bool()]
        assert trained.numel() > 1 and torch.all(trained == reward)  # every turn of the segment: one value
    prm = PluginConfig.from_sources(None, env={"SWE_PRM_ENABLE": "1", "SWE_PRM_URL": "http://judge:30010/v1"})
    assert prm.samples == "segment" and runtime.sample_mode(prm, evaluation=False) == "turn"


@pytest.mark.parametrize("per_token", [False, True], ids=["per-rollout-mean", "per-token-loss"])
def test_the_restatement_gives_what_the_pinned_slime_gives(upstream_slime, codec, qwen_tokenizer, per_token):
    """tests/upstream_loss.py against slime's own code on the same samples: train data, advantages,
    log-probs, loss and gradient. The samples also carry what the equivalence test does not: a removed sample,
    a sample without rollout id, one without loss mask, slime's default reward post-process, a live entropy
    term and dual clip."""
    slime, ours = Upstream(upstream_slime), Restated()
    model = tiny_lm()
    played = played_pair(model, codec, qwen_tokenizer)
    moved(model)

    def batch_of(Sample: Any) -> list[Any]:
        turn = samples_of(Sample, codec, played, "turn")
        samples = turn[:3] + samples_of(Sample, codec, played, "segment")[-2:]
        samples[1].rollout_id = None
        samples[2].loss_mask = None
        # a third rollout of the group, removed (outside our post-process's statistics)
        samples.append(dataclasses.replace(turn[3], index=2, rollout_id=2, remove_sample=True))
        return samples

    args = slime_args(per_token)
    args.entropy_coef, args.eps_clip_c = 0.01, 3.0
    # our post-process on both sides; slime's default (None) against its restatement in tests/upstream_rewards.py
    for theirs, restated in ((post_process_rewards, post_process_rewards), (None, upstream_post_process)):
        results = []
        for trainer, post_process in ((slime, theirs), (ours, restated)):
            data = trainer.train_data(args, batch_of(trainer.Sample), post_process)
            trainer.advantages(args, data)
            model.zero_grad()
            logits = packed_logits(model, data)
            log_probs = torch.cat(trainer.log_probs(args, logits, data)).detach()
            loss, normalizer = trainer.loss(args, {**data, "unconcat_tokens": data["tokens"]}, logits)
            (loss / normalizer).backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            results.append((data, log_probs, loss.detach(), torch.as_tensor(normalizer).float(), grads))
        (want, lp_want, loss_want, norm_want, grad_want), (got, lp_got, loss_got, norm_got, grad_got) = (
            results
        )
        for key in ("response_lengths", "rollout_ids", "total_lengths"):
            assert list(got[key]) == list(want[key]), key
        assert got["rewards"] == pytest.approx(list(want["rewards"]), abs=1e-6)
        for key in ("tokens", "loss_masks", "rollout_log_probs"):
            assert all(torch.equal(a, b) for a, b in zip(got[key], want[key], strict=True)), key
        # slime's default post-process computes in float32, its restatement in float64
        assert all(
            torch.allclose(a, b, atol=1e-6)
            for a, b in zip(got["advantages"], want["advantages"], strict=True)
        )
        assert torch.equal(got["rollout_mask_sums"], want["rollout_mask_sums"])
        assert torch.allclose(lp_got, lp_want, atol=1e-6)
        assert torch.allclose(loss_got, loss_want, rtol=1e-5, atol=1e-8)
        assert torch.equal(norm_got, norm_want)
        assert grad_want.abs().max() > 1e-5  # a real gradient, not zero
        assert torch.allclose(grad_got, grad_want, rtol=1e-4, atol=1e-5 * float(grad_want.abs().max()))
