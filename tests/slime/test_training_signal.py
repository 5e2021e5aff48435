"""The training signal end to end: two prompts × n=4 through the plugin on the real local fleet (a real pool
over a real exec server, the fixture images, grading in a fresh container) with the scripted SGLang, then
slime's rollout plumbing as restated in tests/upstream_rewards.py (group generation and reward, flattening, the
rollout-id rule, the reward post-process, loss masks and per-rollout denominators). slime itself is not
installed; the list-aware slime options are exercised on the same shapes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from agent_fixtures import leftover_containers
from test_e2e import FIX, SAMPLING, SERVER_ABORTS, SUBMIT, new_sample, turn
from upstream_rewards import flatten, upstream_mask_sums, upstream_post_process

from swe_rl.slime import runtime
from swe_rl.slime.e2e import generate
from swe_rl.slime.filters import check_trajectory_reward_nonzero_std
from swe_rl.slime.post_process import post_process_rewards
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_sglang import IM_END, FakeSGLang, TokenReply

FIX2 = "sed -i 's/frozenset(kwargs) if kwargs/frozenset(kwargs.items()) if kwargs/' toolz/functoolz.py"
T1, T2 = "pytoolz__toolz-9001", "pytoolz__toolz-9002"


def slime_args(make_args, sglang: FakeSGLang, **swe) -> SimpleNamespace:
    args = make_args(sglang, **swe)
    args.__dict__.update(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=4,
        rollout_batch_size=2,
        router_policy="consistent_hashing",
        custom_reward_post_process_path="swe_rl.slime.post_process.post_process_rewards",
        group_rm=False,
        partial_rollout=False,
    )
    return args


async def upstream_group(args, group: list[Sample]) -> list:
    """slime's generate_and_rm_group → generate_and_rm with our generate and rm, restated: the group's
    rollouts run concurrently; a returned list is scored by the rm for its samples without a reward, unless
    one of them is ABORTED."""
    results = await asyncio.gather(*(generate(args, s, dict(SAMPLING)) for s in group))
    for item in results:
        items = item if isinstance(item, list) else [item]
        if any(s.status is Sample.Status.ABORTED for s in items):
            continue
        need = [s for s in items if s.reward is None]
        for s, r in zip(need, await reward_func(args, need) if need else []):
            s.reward = r
    return list(results)


def check_rollout_ids(node, depth: int = 0) -> None:
    """Restated: a list of sibling samples at depth ≥ 2 must share one non-None rollout_id."""
    if isinstance(node, list) and node and not isinstance(node[0], list):
        if depth >= 2 and len(node) > 1:
            assert len({s.rollout_id for s in node}) == 1 and node[0].rollout_id is not None
        return
    for item in node:
        check_rollout_ids(item, depth + 1)


@pytest.mark.parametrize(
    "mode, lengths",
    [("segment", [1] * 8), ("turn", [1, 3, 4, 2, 1, 1, 2, 1])],  # no compaction here: one segment each
)
async def test_two_prompts_n4_train_on_per_trajectory_group_advantages(
    plugin_env, qwen_tokenizer, codec, pool, docker_client, mode, lengths
):
    keyed = {
        # prompt 0: two resolved (1 and 3 steps), two unresolved (4 and 2 steps)
        "g0-0": [turn("Fix and submit.", f"{FIX} && {SUBMIT}")],
        "g0-1": [turn("Look.", "ls"), turn("Fix.", FIX), turn("Submit.", SUBMIT)],
        "g0-2": [
            turn("Look.", "ls"),
            turn("Look.", "ls toolz"),
            turn("Look.", "ls tests"),
            turn("Give up.", SUBMIT),
        ],
        "g0-3": [turn("Look.", "ls"), turn("Give up.", SUBMIT)],
        # prompt 1: one image missing (removed), one aborted by the server (removed), one resolved, one not
        "g1-4": [],
        "g1-5": [turn("Look.", "ls"), *[TokenReply(finish_reason="abort", ids=[])] * SERVER_ABORTS],
        "g1-6": [turn("Fix.", FIX2), turn("Submit.", SUBMIT)],
        "g1-7": [turn("Give up.", SUBMIT)],
    }
    groups = [
        [new_sample(T1, group=0, index=i) for i in range(4)],
        [
            new_sample(T2, group=1, index=4, image_name="swe-rl/no-such-image:latest"),
            *(new_sample(T2, group=1, index=i) for i in range(5, 8)),
        ],
    ]
    for g, group in enumerate(groups):
        for s in group:
            s.session_id = f"g{g}-{s.index}"
    with FakeSGLang(qwen_tokenizer, [], keyed={k: list(v) for k, v in keyed.items()}) as sglang:
        args = slime_args(plugin_env, sglang, step_limit=6, samples=mode)
        rollout = [await upstream_group(args, group) for group in groups]
    assert all(not v for v in sglang.keyed.values()), "every scripted turn was played"
    assert all(h["x-smg-routing-key"].startswith("g") for h in sglang.headers)  # every turn carried its key

    # shapes: one list per rollout, one sample per segment or step; siblings share rollout_id and group
    assert all(isinstance(item, list) for group in rollout for item in group)
    assert [len(item) for group in rollout for item in group] == lengths
    check_rollout_ids(rollout)
    samples = flatten(rollout)
    for s in samples:
        assert s.rollout_id == s.index and s.group_index == s.index // 4
        assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs) >= 1
        assert len(s.tokens) > s.response_length  # never an empty prompt
        assert s.reward is not None and s.status is not Sample.Status.ABORTED
    removed = {s.index: s for s in samples if s.remove_sample}
    assert set(removed) == {4, 5}
    assert removed[4].metadata["swe"]["removed_reason"].startswith("env_error")
    assert removed[5].metadata["swe"]["removed_reason"].startswith("server_abort")
    for s in removed.values():
        assert (
            s.tokens == list(codec.header_ids) + [IM_END] and s.loss_mask == [0] and s.reward["score"] == 0.0
        )
    kept = [s for s in samples if not s.remove_sample]
    if mode == "turn":
        assert all(set(s.loss_mask) == {1} for s in kept)
    else:  # the turns of a segment trained, the observations between them masked
        assert all(s.loss_mask[0] == s.loss_mask[-1] == 1 for s in kept)
        assert [0 in s.loss_mask for s in kept] == [n > 1 for n in (1, 3, 4, 2, 2, 1)]
    outcome = {s.index: s.reward["score"] for s in samples}
    assert outcome == {0: 1.0, 1: 1.0, 2: -1.0, 3: -1.0, 4: 0.0, 5: 0.0, 6: 1.0, 7: -1.0}

    # advantages: per trajectory within its group, broadcast to its steps; removed ones 0
    raw, advantages = post_process_rewards(args, samples)
    per_traj = {}
    for s, a in zip(samples, advantages):
        per_traj.setdefault(s.index, set()).add(round(a, 3))
    assert per_traj == {
        0: {0.866},
        1: {0.866},
        2: {-0.866},
        3: {-0.866},
        4: {0.0},
        5: {0.0},
        6: {0.707},
        7: {-0.707},
    }
    assert raw == [s.reward["score"] for s in samples]
    _, upstream = upstream_post_process(args, samples)  # what slime would train on without our post-process
    # (with one sample per trajectory upstream's rows are the groups, yet removed ones sit in its statistics)
    assert [round(a, 3) for a in upstream] != [round(a, 3) for a in advantages]

    # loss weights: each valid trajectory counts once, removed ones not at all
    weight: dict[int, float] = {}
    for s, total in zip(samples, upstream_mask_sums(samples)):
        mask = [0] * s.response_length if s.remove_sample else s.loss_mask
        weight[s.index] = weight.get(s.index, 0.0) + sum(mask) / max(total, 1)
    assert {i: round(w, 6) for i, w in weight.items()} == {0: 1, 1: 1, 2: 1, 3: 1, 4: 0, 5: 0, 6: 1, 7: 1}

    # dynamic sampling: the list-aware filter keeps both groups; upstream's step filter cannot read the lists
    assert all(check_trajectory_reward_nonzero_std(args, group).keep for group in rollout)
    with pytest.raises(AttributeError):
        [item.get_reward_value(args) for item in rollout[0]]  # what check_reward_nonzero_std does
    assert not leftover_containers(docker_client, pool)


async def test_list_modes_refuse_at_the_first_call(plugin_env, qwen_tokenizer):
    with FakeSGLang(qwen_tokenizer, []) as sglang:
        for flag, attr, value in (
            ("--group-rm", "group_rm", True),
            ("--partial-rollout", "partial_rollout", True),
            (
                "check_trajectory_reward_nonzero_std",
                "dynamic_sampling_filter_path",
                "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std",
            ),
        ):
            args = slime_args(plugin_env, sglang)
            setattr(args, attr, value)
            with pytest.raises(ValueError, match=flag):
                await generate(args, new_sample(), dict(SAMPLING))
    assert not sglang.requests


async def test_whole_trajectory_mode_serves_partial_rollout_and_group_rm(
    plugin_env, qwen_tokenizer, pool, docker_client, monkeypatch
):
    def slime_aborts(body):
        monkeypatch.setattr(runtime, "slime_aborting", lambda args: True)
        return TokenReply(finish_reason="abort", ids=[])

    keyed = {"a": [turn("Look.", "ls"), slime_aborts], "b": [turn("Give up.", SUBMIT)]}
    with FakeSGLang(qwen_tokenizer, [], keyed=keyed) as sglang:
        args = slime_args(plugin_env, sglang, dynamic_history=False)
        args.partial_rollout = args.group_rm = True
        group = [new_sample(index=0), new_sample(index=1)]
        group[0].session_id, group[1].session_id = "a", "b"
        # b first: once slime aborts (a's second turn) every running rollout of the process stops
        done_b = await generate(args, group[1], dict(SAMPLING))
        results = [await generate(args, group[0], dict(SAMPLING)), done_b]
        assert [type(r) for r in results] == [Sample, Sample]
        assert results[0].status is Sample.Status.ABORTED and results[0].reward is None
        # upstream's abort walk under --partial-rollout reads each group item as a Sample
        for s in results:
            if s.response and "start_rollout_id" not in s.metadata:
                s.metadata["start_rollout_id"] = 3
        # --group-rm: one reward per group item
        done = [r for r in results if r.status is not Sample.Status.ABORTED]
        for s, r in zip(done, await reward_func(args, done)):
            s.reward = r
        assert results[1].reward["score"] == -1.0
        # the recycled sample is generated again next rollout: the episode is replayed from the start
        monkeypatch.undo()
        sglang.keyed["a"] = [turn("Fix.", FIX), turn("Submit.", SUBMIT)]
        again = await generate(args, results[0], dict(SAMPLING))
    assert again.status is Sample.Status.COMPLETED and again.metadata["swe"]["resolved"]
    assert again.metadata["start_rollout_id"] == 3 and again.index == 0
    assert not leftover_containers(docker_client, pool)
