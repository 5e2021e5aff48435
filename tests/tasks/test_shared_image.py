"""Tasks sharing one per-repo image (SWE-smith's scheme) on real containers: each brings its bug as a
set-up patch; gold resolves and noop does not, and the agent's container shows the bug neither as a
change nor in history (git hygiene prunes the clean code)."""

from __future__ import annotations

import asyncio
import shlex
import subprocess

import pytest
from agent_fixtures import leftover_containers

from swe_rl.agent import AgentConfig, ExitReason, run_instance
from swe_rl.agent.fleet_environment import fleet_environment
from swe_rl.agent.git_hygiene import clean_history
from swe_rl.grading import GradeStatus
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies import GoldPolicy, NoopPolicy
from swe_rl.tasks import load_instances
from swe_rl.tasks.setup import TaskSetupFailed, set_up_task, setup_script
from tests.conftest import ROOT

SHARED_JSONL = ROOT / "data" / "fixtures" / "shared_image.jsonl"


@pytest.fixture(scope="module")
def shared_instances(docker_client, base_image):
    loaded = load_instances(SHARED_JSONL)
    assert loaded.ok, loaded.errors
    images = {inst.image for inst in loaded.instances}
    assert len(images) == 1 and len(loaded.instances) == 2  # two tasks, one image
    try:
        docker_client.images.get(next(iter(images)))
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: build the bundled images
        subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True)
    return loaded.instances


def test_the_script_carries_the_patch_and_commits_only_for_episodes(shared_instances):
    inst = shared_instances[0]
    episode, grading = setup_script(inst, commit=True), setup_script(inst, commit=False)
    assert "git apply --index" in episode and "commit-tree" in episode
    assert "--index" not in grading and "commit-tree" not in grading
    assert inst.setup_patch and inst.setup_patch not in episode  # base64: no quoting of the patch's text


async def test_gold_resolves_and_noop_does_not_on_a_shared_image(
    client, pool, shared_instances, docker_client
):
    harness = BashBlockHarness()
    results = await asyncio.gather(
        *(
            run_instance(inst, GoldPolicy(), harness, client=client, config=AgentConfig(step_limit=5))
            for inst in shared_instances
        )
    )
    for result in results:
        assert result.status is GradeStatus.RESOLVED, (
            result.instance_id,
            result.grade.message,
            result.agent.error,
        )
        inst = next(i for i in shared_instances if i.instance_id == result.instance_id)
        changed = [line for line in result.agent.patch.splitlines() if line.startswith(("+", "-"))]
        assert changed == [line for line in inst.patch.splitlines() if line.startswith(("+", "-"))]
    noop = await run_instance(shared_instances[0], NoopPolicy(), harness, client=client)
    assert noop.agent.exit_reason is ExitReason.SUBMITTED and noop.status is GradeStatus.NO_PATCH
    assert not leftover_containers(docker_client, pool)


async def test_the_episode_sees_the_bug_as_the_only_commit_and_not_the_fix(
    client, pool, shared_instances, docker_client
):
    inst = shared_instances[0]
    bugged = next(
        line[1:]
        for line in inst.setup_patch.splitlines()
        if line.startswith("+") and line[1:].strip() and not line.startswith("+++")
    )
    async with fleet_environment(client, inst) as env:
        clean_blob = (await env.exec("git rev-parse HEAD:toolz/itertoolz.py")).output.strip()
        await set_up_task(env, inst, commit=True)
        await clean_history(env, inst.workdir)
        state = await env.exec(
            "git log --oneline | wc -l; git status --porcelain --untracked-files=no | wc -l; "
            f"git cat-file -e {clean_blob} && echo clean-blob-present || echo clean-blob-gone"
        )
        assert state.output.split() == ["1", "0", "clean-blob-gone"], state.output
        source = (await env.exec(f"git grep -F -c -e {shlex.quote(bugged.strip())} HEAD -- toolz")).output
        assert source.strip(), "the bug is in the committed tree"
    assert not leftover_containers(docker_client, pool)


async def test_a_set_up_patch_that_does_not_apply_is_an_env_error_not_a_score(client, pool, shared_instances):
    inst = shared_instances[0]
    broken = inst.model_copy(
        update={"extra": {**inst.extra, "setup_patch": inst.setup_patch.replace("-", "~", 3)}}
    )
    async with fleet_environment(client, broken) as env:
        with pytest.raises(TaskSetupFailed, match="does not apply"):
            await set_up_task(env, broken, commit=True)
    result = await run_instance(broken, GoldPolicy(), BashBlockHarness(), client=client)
    assert result.agent.exit_reason is ExitReason.ENV_ERROR and "set-up" in (result.agent.error or "")
    assert not result.resolved
