"""Forking an episode (swe_rl/agent/fork.py): a real pool and fixture container, the scripted SGLang
double and the real Qwen tokenizer. A branch's first call sends exactly the ids the original sent at
the fork step, its tokens are the original's up to there, and its container holds the original's
state at that step."""

from __future__ import annotations

import asyncio
import os

import pytest
from agent_fixtures import leftover_containers
from pool_fixtures import PoolProc

from swe_rl.agent.fork import take_fork
from swe_rl.agent.local_environment import LocalEnvironment
from swe_rl.agent.loop import AgentConfig, run_agent
from swe_rl.agent.protocols import TokenUsage
from swe_rl.agent.results import ExitReason
from swe_rl.harnesses.bash_block import BashBlockHarness
from swe_rl.policies.sglang_tokens import SGLangTokenConfig, SGLangTokenPolicy
from swe_rl.testing.fake_sglang import FakeSGLang

pytestmark = pytest.mark.docker

TOOLZ = "pytoolz__toolz-9001"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
SAMPLING = {"temperature": 1.0, "max_new_tokens": 256, "skip_special_tokens": False, "no_stop_trim": True}


def turn(reasoning: str, command: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n\nNext.\n\n```bash\n{command}\n```"


SCRIPT = [
    turn("Edit the loop.", "sed -i 's/def identity(x):/def identity(x):  # edited/' toolz/functoolz.py"),
    turn("Leave a note.", "printf 'note\\n' > NOTES.txt && chmod +x NOTES.txt"),
    turn("Look.", "cat NOTES.txt && git status --short"),
    turn("Done.", SUBMIT),
]
FORK_AT = 2


@pytest.fixture
def pool(fleet, pool_factory, internal_network, tmp_path) -> PoolProc:  # snapshots kept under tmp_path
    snapshots = str(tmp_path / "snapshots")
    return pool_factory(fleet(1, SWE_EXEC_NETWORKS=internal_network, SWE_EXEC_SNAPSHOT_DIR=snapshots))


def policy_for(codec, sglang: FakeSGLang) -> SGLangTokenPolicy:
    return SGLangTokenPolicy(codec, SGLangTokenConfig(url=f"{sglang.url}/generate", sampling_params=SAMPLING))


async def test_branches_are_token_exact_from_the_fork(
    client, pool, fixture_instances, codec, qwen_tokenizer, docker_client, tmp_path
):
    inst = fixture_instances[TOOLZ]
    harness, config = BashBlockHarness(), AgentConfig(step_limit=6)
    with FakeSGLang(qwen_tokenizer, SCRIPT) as sglang:
        original = policy_for(codec, sglang)
        result = await run_agent(inst, original, harness, client=client, config=config, fork_at=FORK_AT)
        await original.aclose()
    assert result.exit_reason is ExitReason.SUBMITTED, result.error
    fork = result.fork
    assert fork is not None and fork.step == FORK_AT and len(fork.steps) == FORK_AT
    assert original.trajectory is not None
    whole = original.trajectory.segment

    async def branch() -> tuple[FakeSGLang, SGLangTokenPolicy, object]:
        with FakeSGLang(qwen_tokenizer, SCRIPT[FORK_AT:]) as server:
            policy = policy_for(codec, server)
            res = await run_agent(inst, policy, harness, client=client, config=config, resume=fork)
            await policy.aclose()
        return server, policy, res

    branches = await asyncio.gather(*(branch() for _ in range(3)))
    for server, policy, res in branches:
        assert res.exit_reason is ExitReason.SUBMITTED and res.resumed_at == FORK_AT  # type: ignore[attr-defined]
        # the fork point: the branch's first context is the original's context at step FORK_AT, id for id
        assert server.requests[0]["input_ids"] == sglang.requests[FORK_AT]["input_ids"]
        assert policy.trajectory is not None
        seg = policy.trajectory.segment
        assert seg.tokens == whole.tokens and seg.loss_mask == whole.loss_mask  # same script: same ids
        prefix = len(sglang.requests[FORK_AT]["input_ids"]) - seg.prompt_len
        assert seg.logprobs[:prefix] == whole.logprobs[:prefix]  # before the fork: the original's log-probs
        for req, out in zip(server.requests, server.outputs):  # after it: what this branch's server sampled
            start = len(req["input_ids"]) - seg.prompt_len
            assert seg.logprobs[start : start + len(out.ids)] == out.logprobs
        # the container held the state at the fork: the same observations, the same final patch
        assert [s.observation for s in res.steps] == [s.observation for s in result.steps]  # type: ignore[attr-defined]
        assert res.patch == result.patch and "NOTES.txt" in res.patch  # type: ignore[attr-defined]
    assert await client.delete_snapshot(fork.snapshot.snapshot_id)
    assert not leftover_containers(docker_client, pool)
    assert not [f for _, _, files in os.walk(tmp_path / "snapshots") for f in files]


async def test_fork_needs_a_snapshot_environment(tmp_path):
    env = LocalEnvironment(tmp_path, tmp_path)
    with pytest.raises(TypeError, match="cannot take snapshots"):
        await take_fork(None, 0, [], [], TokenUsage(), env, None)  # type: ignore[arg-type]
