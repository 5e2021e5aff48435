"""The plugin's fork modes through its generate (swe_rl/slime/fork_mode.py, branching.py) on a real pool:
retry from the last good step when the agent's container is removed mid-episode (as when a node dies),
and branching groups (n continuations of one trunk)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest
from agent_fixtures import leftover_containers
from pool_fixtures import PoolProc
from test_e2e import FIX, SAMPLING, SUBMIT, new_sample, turn
from upstream_rewards import flatten
from upstream_train import train_args, train_data_both

from swe_rl.slime.e2e import generate
from swe_rl.slime.post_process import post_process_rewards
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_sglang import FakeSGLang

pytestmark = pytest.mark.docker


@pytest.fixture
def pool(fleet, pool_factory, internal_network, tmp_path) -> PoolProc:  # snapshots kept under tmp_path
    snapshots = str(tmp_path / "snapshots")
    return pool_factory(fleet(1, SWE_EXEC_NETWORKS=internal_network, SWE_EXEC_SNAPSHOT_DIR=snapshots))


def snapshot_files(tmp_path) -> list[str]:
    return [f for _, _, files in os.walk(tmp_path / "snapshots") for f in files]


@pytest.mark.parametrize("retries", [1, 0])
async def test_node_failure_resumes_from_the_last_checkpoint(
    plugin_env, pool, docker_client, fixture_instances, qwen_tokenizer, tmp_path, retries
):
    def kill_then(reply: str) -> Any:
        def act(body: dict[str, Any]) -> str:  # the node loses the agent's container while the model thinks
            for c in docker_client.containers.list(filters={"label": f"swe-rl.owner={pool.pool_id}"}):
                c.remove(force=True)
            return reply

        return act

    script = [
        turn("Fix it.", FIX),
        kill_then(turn("Look.", "git status --short")),
        turn("Look.", "git status --short"),  # the resumed step 1
        turn("Done.", SUBMIT),
    ]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, retry_infra_failures=retries, checkpoint_every=1, dynamic_history=False)
        samples = await generate(args, new_sample(), dict(SAMPLING))
    sample = samples[-1] if isinstance(samples, list) else samples
    swe = sample.metadata["swe"]
    if not retries:  # the old way: removed, never scored
        assert sample.remove_sample and swe["removed_reason"].startswith("env_error")
        return
    assert not sample.remove_sample and swe["status"] == "resolved", swe
    assert sample.status is Sample.Status.COMPLETED
    assert swe["fork"] == {"retries": 1, "retried_from": [1], "errors": [swe["fork"]["errors"][0]]}
    # the resumed call saw exactly the context of the failed one: the same ids before the checkpoint
    assert sglang.requests[2]["input_ids"] == sglang.requests[1]["input_ids"]
    # the trained ids are those of the resumed attempt: the failed turn is not in the sample
    assert sample.tokens[: len(sglang.requests[3]["input_ids"])] == sglang.requests[3]["input_ids"]
    assert not leftover_containers(docker_client, pool)
    assert snapshot_files(tmp_path) == []  # every checkpoint deleted


async def test_branching_group_continues_one_trunk(
    plugin_env, pool, docker_client, fixture_instances, qwen_tokenizer, tmp_path, request
):
    """3 samples of a group share the trunk's step 0 (the fix), then act differently from the same state:
    one reverts the fix (no patch), two submit (resolved). The trunk's ids are masked in every sample."""
    revert = turn("Undo.", "git checkout toolz/itertoolz.py")
    firsts = [turn("Done.", SUBMIT), revert, turn("Done.", SUBMIT)]
    lock = threading.Lock()

    def decide(body: dict[str, Any]) -> str:
        with lock:
            if len(sglang.requests) == 1:
                return turn("Fix it.", FIX)  # the trunk
            if body["input_ids"] == sglang.requests[1]["input_ids"]:
                return firsts.pop(0)  # a branch's first turn, from the fork point
            return turn("Done.", SUBMIT)

    with FakeSGLang(qwen_tokenizer, [decide] * 6) as sglang:
        args = plugin_env(sglang, branch_at_step=1, dynamic_history=False)
        args.n_samples_per_prompt = 3
        groups = await asyncio.gather(
            *(generate(args, new_sample(index=i), dict(SAMPLING)) for i in range(3))
        )
    trunk = sglang.outputs[0].ids
    statuses = []
    for samples in groups:
        sample = samples[-1] if isinstance(samples, list) else samples
        swe = sample.metadata["swe"]
        assert not sample.remove_sample and swe["branch"]["at_step"] == 1, swe
        statuses.append(swe["status"])
        prompt = len(sample.tokens) - sample.response_length
        start = len(sglang.requests[0]["input_ids"])
        assert sample.tokens[start : start + len(trunk)] == trunk  # the trunk's ids, verbatim
        assert sample.loss_mask[start - prompt : start - prompt + len(trunk)] == [0] * len(
            trunk
        )  # not trained
        assert sample.tokens[: len(sglang.requests[1]["input_ids"])] == sglang.requests[1]["input_ids"]
        assert 1 in sample.loss_mask  # the branch's own turns are
    assert sorted(statuses) == ["no_patch", "resolved", "resolved"]  # the revert left no patch
    # the group's advantages (our post-process, as slime calls it) compare the continuations
    args.__dict__.update(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True)
    args.__dict__.update(rollout_batch_size=1, group_rm=False)
    flat = flatten(list(groups))
    for s in flat:
        if s.reward is None:
            s.reward = (await reward_func(args, [s]))[0]
    _, advantages = post_process_rewards(args, flat)
    by_status: dict[str, set[float]] = {}
    for s, adv in zip(flat, advantages):
        by_status.setdefault(s.metadata["swe"]["status"], set()).add(round(adv, 3))
    assert max(by_status["no_patch"]) < 0 < min(by_status["resolved"])
    # through slime's train-data conversion (restated; the pinned slime's own when here): the group's
    # advantages over its 3 continuations, the trunk's ids kept in the tokens with loss mask 0; one sample per
    # branch, so slime's default post-process (None) gives the same advantages as ours
    targs = train_args(3)
    for name, data in train_data_both(request, targs, flat) + train_data_both(request, targs, flat, None):
        assert [round(float(r), 5) for r in data["rewards"]] == [round(a, 5) for a in advantages], name
        assert [m.tolist() for m in data["loss_masks"]] == [s.loss_mask for s in flat], name
        assert [t.tolist() for t in data["tokens"]] == [s.tokens for s in flat], name
    assert len(sglang.requests) == 5  # one trunk turn, not three
    assert not leftover_containers(docker_client, pool)
    assert snapshot_files(tmp_path) == []  # the trunk's snapshot went with the last branch
