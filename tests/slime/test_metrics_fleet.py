"""The dashboard hooks called the way slime calls them, on batches the plugin made on the real local
fleet (real pool + exec server, fixture images, grading in a fresh container) with the scripted
SGLang, every figure checked against a count made by hand from the scripts.

The contract restated (slime at the pin, slime/observability/rollout_metrics.py and slime/ray/rollout.py):
- after a training rollout, slime flattens the batch (lists of step samples become one flat list,
  rewards already set) and calls ``f(rollout_id, args, samples, rollout_extra_metrics, rollout_time)``;
- after an evaluation it calls ``f(rollout_id, args, data, extra_metrics)`` with ``data`` =
  ``{dataset name: {"rewards": [...], "truncated": [...], "samples": [...]}}``;
- a truthy return skips slime's default logging (ours returns False);
- the default logging sends a dict to ``slime.observability.logging_utils.log(args, metrics,
  step_key)`` where ``metrics[step_key]`` is ``compute_rollout_step(args, rollout_id)`` and the step
  keys are ``rollout/step`` / ``eval/step`` (wandb plots ``rollout/*`` and ``eval/*`` against them).
"""

from __future__ import annotations

import asyncio
import statistics
from types import SimpleNamespace

import pytest
from agent_fixtures import leftover_containers
from test_e2e import FIX, SAMPLING, SUBMIT, new_sample, turn

from swe_rl.metrics.rollout import percentile
from swe_rl.slime.metrics import log_eval_rollout_data, log_rollout_data
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_sglang import FakeSGLang, TokenReply

NO_IMAGE = {"image_name": "swe-rl/no-such-image:latest"}
RESOLVE = [
    turn("Find interleave.", "grep -n 'takewhile' toolz/itertoolz.py"),
    turn("Keep cycling.", FIX, "Fix it."),
    turn("Done.", SUBMIT, "Submit."),
]


SLIME_ABORT = "<slime aborts>"
"""Script item: slime aborts this rollout (GenerateState.aborted) and SGLang answers the request with an abort."""


async def _play(plugin_env, tokenizer, script, sample, sampling=None, **swe):
    """One generate call with its own scripted router; (samples as a list, the router's outputs)."""
    with FakeSGLang(tokenizer, []) as sglang:
        args = plugin_env.args(sglang, **swe)

        def slime_aborts(body):
            args.slime_is_aborting = True  # read by the `play` fixture's slime_aborting: this rollout only
            return TokenReply(finish_reason="abort", ids=[])

        sglang.add(*(slime_aborts if item == SLIME_ABORT else item for item in script))
        out = await plugin_env.generate(args, sample, {**SAMPLING, **(sampling or {})})
    samples = out if isinstance(out, list) else [out]
    scored = [
        s for s in samples if s.status is not Sample.Status.ABORTED
    ]  # slime does not score aborted ones
    if scored:
        for s, r in zip(scored, await reward_func(SimpleNamespace(reward_key="score"), scored)):
            s.reward = r
    return samples, [len(o.ids) for o in sglang.outputs]


@pytest.fixture
def play(plugin_env, monkeypatch):
    from swe_rl.slime import runtime
    from swe_rl.slime.e2e import generate

    # an abort is slime's own only for the rollout whose script said so (else it is a removed server abort)
    monkeypatch.setattr(runtime, "slime_aborting", lambda args: getattr(args, "slime_is_aborting", False))

    return SimpleNamespace(generate=generate, args=plugin_env)


def _timings(trajs, name):
    return [t["episode"][name] for t in trajs if t.get("episode", {}).get(name) is not None]


def _pop_infra(m, infos):
    """Infrastructure figures: real timings, so the hand count is made from each trajectory's metadata."""
    for name in ("allocate_seconds", "exec_seconds", "grade_seconds"):
        values = _timings(infos, name)
        assert values and all(v >= 0 for v in values), name
        assert m.pop(f"infra/{name}_p50") == percentile(values, 50)
        assert m.pop(f"infra/{name}_p90") == percentile(values, 90)
    turns = [x for i in infos for x in i["episode"]["model_seconds_per_turn"]]
    assert m.pop("infra/model_seconds_per_turn_mean") == pytest.approx(statistics.fmean(turns))
    assert m.pop("infra/model_seconds_per_turn_p50") == percentile(turns, 50)
    assert m.pop("infra/model_seconds_per_turn_p90") == percentile(turns, 90)
    assert m.pop("infra/warm_hit_rate") == 0.0  # the test fleet keeps no warm containers


async def test_per_turn_batch_every_figure_by_hand(play, qwen_tokenizer, slime_backend, pool, docker_client):
    # group 10: resolved (3 turns) and no_patch with one format error (3 turns);
    # group 11: a turn cut at max_new_tokens then no_patch (2 turns), a missing image (removed), an abort by slime
    (a, a_ids), (b, b_ids), (c, c_ids), (d, d_ids), (e, e_ids) = await asyncio.gather(
        _play(play, qwen_tokenizer, RESOLVE, new_sample(group=10, index=0), samples="turn"),
        _play(
            play,
            qwen_tokenizer,
            [turn("Look.", "ls"), "no block here, just rambling", turn("Stop.", SUBMIT)],
            new_sample(group=10, index=1),
            samples="turn",
        ),
        _play(
            play,
            qwen_tokenizer,
            [turn("A very long plan " * 30, "ls"), turn("Stop.", SUBMIT)],
            new_sample(group=11, index=2),
            {"max_new_tokens": 40},
            samples="turn",
        ),
        _play(
            play,
            qwen_tokenizer,
            [turn("Look.", "ls")],
            new_sample(group=11, index=3, **NO_IMAGE),
            samples="turn",
        ),
        _play(
            play,
            qwen_tokenizer,
            [turn("Look.", "ls"), SLIME_ABORT],
            new_sample(group=11, index=4),
            samples="turn",
        ),
    )
    assert [len(x) for x in (a, b, c, d, e)] == [3, 3, 2, 1, 1]
    assert (
        c[0].status is Sample.Status.TRUNCATED and d[0].remove_sample and e[0].status is Sample.Status.ABORTED
    )
    batch = a + b + c + d + e  # slime hands the hook the flattened batch
    args = SimpleNamespace(
        reward_key="score", use_wandb=True, use_tensorboard=True, wandb_always_use_train_step=False
    )

    assert log_rollout_data(4, args, batch, {"rollout/extra": 1.0}, 12.5) is False
    (call,) = slime_backend.calls
    assert call.step_key == "rollout/step" and call.metrics["rollout/step"] == 4 and call.args is args
    m = {k: v for k, v in call.metrics.items() if k != "rollout/step"}
    assert all(k.startswith("rollout/swe/") for k in m)
    m = {k.removeprefix("rollout/swe/"): v for k, v in m.items()}

    fe = [s.metadata["swe"]["format_errors"] for s in (a[0], b[0], c[0])]
    assert fe == [0, 1, 1]  # the rambling turn; the turn cut inside its thinking has no action
    want = {
        "trajectories": 5,
        "samples": 10,
        "aborted_rate": 1 / 5,
        "removed_rate": 1 / 4,
        "removed/env_error_rate": 1 / 4,  # over the 4 finished trajectories
        "removed/env_error/agent_ImageNotFound_count": 1,  # the fault kind: its image is on no node
        "outcome/resolved_rate": 1 / 4,
        "outcome/no_patch_rate": 2 / 4,
        "outcome/env_error_rate": 1 / 4,
        "outcome/unresolved_rate": 0.0,
        "outcome/patch_apply_failed_rate": 0.0,
        "outcome/eval_timeout_rate": 0.0,
        "outcome/count/resolved": 1,
        "outcome/count/no_patch": 2,
        "outcome/count/env_error": 1,
        "outcome/count/unresolved": 0,
        "outcome/count/patch_apply_failed": 0,
        "outcome/count/eval_timeout": 0,
        # rewards of the scored trajectories a, b, c: +1, -1, -1
        "outcome/reward_mean": -1 / 3,
        "outcome/reward_std": statistics.pstdev([1, -1, -1]),
        # group 10: {+1, -1} (std 1); group 11: {c} alone (no gradient, all fail)
        "outcome/groups": 2,
        "outcome/group_reward_std_mean": 0.5,
        "outcome/zero_variance_group_rate": 0.5,
        "outcome/all_fail_group_rate": 0.5,
        "outcome/all_pass_group_rate": 0.0,
        "behaviour/turns_mean": 8 / 3,
        "behaviour/turns_p50": 3,
        "behaviour/turns_p90": 3,
        "behaviour/turns_max": 3,
        "behaviour/format_error_rate": sum(fe) / 8,
        "behaviour/exit/submitted_rate": 1.0,
        "behaviour/truncated_rate": 1 / 3,
        "behaviour/compacted_rate": 0.0,
        "behaviour/segments_mean": 1.0,
        "behaviour/segments_max": 1,
        "behaviour/sampled_tokens_mean": statistics.fmean([sum(a_ids), sum(b_ids), sum(c_ids)]),
        "behaviour/sampled_tokens_p50": sorted([sum(a_ids), sum(b_ids), sum(c_ids)])[1],
        "behaviour/sampled_tokens_p90": max(sum(a_ids), sum(b_ids), sum(c_ids)),
        "behaviour/sampled_tokens_max": max(sum(a_ids), sum(b_ids), sum(c_ids)),
        # the scripted agents touch no test and probe nothing: the integrity fields say so
        "integrity/tampered_rate": 0.0,
        "integrity/voided_rate": 0.0,
        "integrity/canary_tripped_rate": 0.0,
        "integrity/twin_tripped_rate": 0.0,
        "integrity/capability_flagged_rate": 0.0,
        "integrity/flagged_rate": 0.0,
    }
    for name, value in want.items():
        assert m.pop(name) == pytest.approx(value), name
    _pop_infra(m, [x[0].metadata["swe"] for x in (a, b, c, d)])  # the finished trajectories
    assert not m, f"figures not counted by hand: {m}"
    assert not leftover_containers(docker_client, pool)


async def test_single_sample_batch_and_eval_hook_by_hand(
    play, qwen_tokenizer, slime_backend, pool, docker_client
):
    # one sample per trajectory: resolved; a full context (TRUNCATED, no_patch); a missing image (removed)
    (f, f_ids), (g, g_ids), (h, _) = await asyncio.gather(
        _play(play, qwen_tokenizer, RESOLVE, new_sample(group=20, index=0), dynamic_history=False),
        _play(
            play,
            qwen_tokenizer,
            [turn(f"Step {i}.", "seq 1 80") for i in range(8)],
            new_sample(group=20, index=1),
            {"max_new_tokens": 128},
            dynamic_history=False,
            context=1400,
        ),
        _play(
            play,
            qwen_tokenizer,
            [turn("Look.", "ls")],
            new_sample(group=21, index=2, **NO_IMAGE),
            dynamic_history=False,
        ),
    )
    assert g[0].status is Sample.Status.TRUNCATED and h[0].remove_sample
    batch = f + g + h
    args = SimpleNamespace(
        reward_key="score",
        eval_reward_key=None,
        use_wandb=True,
        use_tensorboard=False,
        wandb_always_use_train_step=True,
        rollout_batch_size=4,
        n_samples_per_prompt=8,
        global_batch_size=16,
    )
    turns = [len(f_ids), len(g_ids)]  # one turn per router answer: f three, g until the context was full

    want = {
        "trajectories": 3,
        "samples": 3,
        "aborted_rate": 0.0,
        "removed_rate": 1 / 3,
        "removed/env_error_rate": 1 / 3,
        "removed/env_error/agent_ImageNotFound_count": 1,  # the fault kind: its image is on no node
        "outcome/resolved_rate": 1 / 3,
        "outcome/no_patch_rate": 1 / 3,
        "outcome/env_error_rate": 1 / 3,
        "outcome/unresolved_rate": 0.0,
        "outcome/patch_apply_failed_rate": 0.0,
        "outcome/eval_timeout_rate": 0.0,
        "outcome/count/resolved": 1,
        "outcome/count/no_patch": 1,
        "outcome/count/env_error": 1,
        "outcome/count/unresolved": 0,
        "outcome/count/patch_apply_failed": 0,
        "outcome/count/eval_timeout": 0,
        "outcome/reward_mean": 0.0,
        "outcome/reward_std": 1.0,
        "outcome/groups": 1,
        "outcome/group_reward_std_mean": 1.0,
        "outcome/zero_variance_group_rate": 0.0,
        "outcome/all_fail_group_rate": 0.0,
        "outcome/all_pass_group_rate": 0.0,
        "behaviour/turns_mean": statistics.fmean(turns),
        "behaviour/turns_p50": min(turns),
        "behaviour/turns_p90": max(turns),
        "behaviour/turns_max": max(turns),
        "behaviour/format_error_rate": 0.0,
        "behaviour/exit/submitted_rate": 1 / 2,
        "behaviour/truncated_rate": 1 / 2,
        "behaviour/compacted_rate": 0.0,
        "behaviour/segments_mean": 1.0,
        "behaviour/segments_max": 1,
        "behaviour/sampled_tokens_mean": (sum(f_ids) + sum(g_ids)) / 2,
        "behaviour/sampled_tokens_p50": min(sum(f_ids), sum(g_ids)),
        "behaviour/sampled_tokens_p90": max(sum(f_ids), sum(g_ids)),
        "behaviour/sampled_tokens_max": max(sum(f_ids), sum(g_ids)),
        "integrity/tampered_rate": 0.0,
        "integrity/voided_rate": 0.0,
        "integrity/canary_tripped_rate": 0.0,
        "integrity/twin_tripped_rate": 0.0,
        "integrity/capability_flagged_rate": 0.0,
        "integrity/flagged_rate": 0.0,
    }
    exits = {x[0].metadata["swe"]["exit_reason"] for x in (f, g)}
    assert exits == {"submitted", g[0].metadata["swe"]["exit_reason"]} and len(exits) == 2
    want[f"behaviour/exit/{g[0].metadata['swe']['exit_reason']}_rate"] = 1 / 2

    assert log_rollout_data(2, args, batch, None, 3.0) is False
    # slime's step with --wandb-always-use-train-step: rollout_id * batch * n // global batch
    (call,) = slime_backend.calls
    assert call.metrics["rollout/step"] == 2 * 4 * 8 // 16 and call.step_key == "rollout/step"
    m = {k.removeprefix("rollout/swe/"): v for k, v in call.metrics.items() if k != "rollout/step"}
    for name, value in want.items():
        assert m.pop(name) == pytest.approx(value), name
    _pop_infra(m, [x[0].metadata["swe"] for x in (f, g, h)])
    assert not m, f"figures not counted by hand: {m}"

    # the eval hook on the same samples, as slime's eval hands them over; same figures under eval/<dataset>/swe/
    data = {
        "swe": {
            "rewards": [s.reward["score"] for s in batch],
            "truncated": [s.status is Sample.Status.TRUNCATED for s in batch],
            "samples": batch,
        }
    }
    assert log_eval_rollout_data(2, args, data, {"eval/extra": 1.0}) is False
    call = slime_backend.calls[-1]
    assert call.step_key == "eval/step" and call.metrics["eval/step"] == 4
    ev = {k.removeprefix("eval/swe/swe/"): v for k, v in call.metrics.items() if k != "eval/step"}
    assert ev == {
        k.removeprefix("rollout/swe/"): v
        for k, v in slime_backend.calls[0].metrics.items()
        if k != "rollout/step"
    }
    assert not leftover_containers(docker_client, pool)
