"""Retry from the last good step (swe_rl/slime/fork_mode.py) through the plugin's generate: the agent's
container is removed mid-episode (as when a node dies); the episode resumes from its last checkpoint in
a restored container and the sample stays trainable, marked in its metadata."""

from __future__ import annotations

import os
from typing import Any

import pytest
from agent_fixtures import fixture_instances, leftover_containers  # noqa: F401
from pool_fixtures import PoolProc, fleet, pool_factory  # noqa: F401
from test_e2e import FIX, SAMPLING, SUBMIT, new_sample, plugin_env, turn  # noqa: F401
from token_fixtures import codec, qwen_tokenizer, qwen_tokenizer_dir, renderer  # noqa: F401

from swe_rl.slime.e2e import generate
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
