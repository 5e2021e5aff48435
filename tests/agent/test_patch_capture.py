"""Patch capture contains only the agent's changes, on an image whose set-up leaves untracked
build output (fixture pytoolz__toolz-9003: ``build/`` and ``toolz.egg-info/`` untracked in /testbed).

Real pool, real exec server, real containers; grading in a fresh container.
"""

from __future__ import annotations

import re

import pytest
from agent_fixtures import leftover_containers

from swe_rl.agent import AgentConfig, ExitReason, run_instance
from swe_rl.fleet import patch_baseline
from swe_rl.fleet.errors import BadRequest
from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader, GraderConfig
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies.gold import GoldPolicy
from swe_rl.policies.noop import SUBMIT_COMMAND, NoopPolicy, bash_turn

BUILD = "pytoolz__toolz-9003"
FIX = "sed -i 's/remaining.difference_update(keys\\[:-1\\])/remaining.difference_update(keys)/' toolz/dicttoolz.py"


class ScriptedPolicy:
    """Plays the given bash commands one per turn, then submits."""

    def __init__(self, commands: list[str]) -> None:
        self.commands = commands

    async def act(self, messages, **kwargs):
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn < len(self.commands):
            return bash_turn(self.commands[turn], "Next step.")
        return bash_turn(SUBMIT_COMMAND, "Submit.")


def files_of(patch: str) -> list[str]:
    return re.findall(r"^diff --git a/\S+ b/(\S+)$", patch, flags=re.MULTILINE)


async def test_noop_on_untracked_build_output_is_no_patch_with_an_empty_patch_and_tests_run(
    client, pool, fixture_instances, docker_client
):
    result = await run_instance(fixture_instances[BUILD], NoopPolicy(), BashBlockHarness(), client=client)
    assert result.agent.exit_reason is ExitReason.SUBMITTED
    assert result.agent.patch == ""
    assert result.status is GradeStatus.NO_PATCH and not result.resolved
    # no short-circuit: the tests ran without a patch (the baseline a user compares with)
    grade = result.grade
    assert grade.tests_status and grade.test_log
    assert set(grade.fail_to_pass.failure) == set(fixture_instances[BUILD].fail_to_pass)
    assert grade.pass_to_pass.failure == [] and grade.apply_strategy is None
    assert "tests without a patch" in grade.message
    assert leftover_containers(docker_client, pool, wait=15) == []


async def test_gold_on_untracked_build_output_applies_with_plain_git_apply(client, fixture_instances):
    result = await run_instance(fixture_instances[BUILD], GoldPolicy(), BashBlockHarness(), client=client)
    assert files_of(result.agent.patch) == ["toolz/dicttoolz.py"]
    assert result.status is GradeStatus.RESOLVED, result.grade.message
    assert result.grade.apply_strategy == "git apply"


async def test_agent_edits_and_new_files_inside_the_untracked_folder_are_in_the_patch(
    client, fixture_instances
):
    commands = [
        "git status --porcelain",
        "echo '# touched by the agent' >> build/lib/toolz/dicttoolz.py",
        "printf 'VALUE = 1\\n' > build/lib/toolz/agent_new.py && printf 'x\\n' > toolz.egg-info/NOTES",
        "rm build/lib/toolz/recipes.py",
        FIX,
    ]
    result = await run_instance(
        fixture_instances[BUILD],
        ScriptedPolicy(commands),
        BashBlockHarness(),
        client=client,
        config=AgentConfig(step_limit=10, command_timeout=60),
    )
    patch = result.agent.patch
    assert sorted(files_of(patch)) == sorted(
        [
            "build/lib/toolz/agent_new.py",
            "build/lib/toolz/dicttoolz.py",
            "build/lib/toolz/recipes.py",
            "toolz.egg-info/NOTES",
            "toolz/dicttoolz.py",
        ]
    )
    edited = patch.split("diff --git a/build/lib/toolz/dicttoolz.py")[1].split("diff --git")[0]
    assert (
        "new file mode" not in edited and "+# touched by the agent" in edited
    )  # a modification, not a creation
    assert (
        "new file mode" in patch.split("diff --git a/build/lib/toolz/agent_new.py")[1].split("diff --git")[0]
    )
    assert (
        "deleted file mode"
        in patch.split("diff --git a/build/lib/toolz/recipes.py")[1].split("diff --git")[0]
    )
    # it applies as is in a fresh container of the same image (where build/ is present, untracked)
    assert result.status is GradeStatus.RESOLVED, result.grade.message
    assert result.grade.apply_strategy == "git apply"


async def test_without_a_baseline_the_build_output_would_be_swept_in(client, fixture_instances):
    """What the baseline prevents: a plain `git add -A` diff carries the image's build output."""
    inst = fixture_instances[BUILD]
    async with client.lease(inst.image, workdir=inst.workdir) as lease:
        plain = await lease.diff()
        assert "build/lib/toolz/dicttoolz.py" in files_of(plain) and "toolz.egg-info/PKG-INFO" in files_of(
            plain
        )
    async with client.lease(inst.image, workdir=inst.workdir) as lease:
        summary = await lease.record_baseline()
        assert summary.startswith("baseline ")
        assert await lease.diff() == ""
        assert (await lease.exec("git status --porcelain")).output.split() == [
            "??",
            "build/",
            "??",
            "toolz.egg-info/",
        ]


async def test_ignored_files_present_at_start_stay_out_even_when_gitignore_changes(client, fixture_instances):
    inst = fixture_instances["pytoolz__toolz-9001"]
    async with client.lease(inst.image, workdir=inst.workdir) as lease:
        await lease.exec("mkdir -p cache && echo old > cache/blob && printf 'cache/\\n' > .git/info/exclude")
        await lease.record_baseline()
        # the agent drops the ignore rule: what was there before still is not its work
        await lease.exec("printf '' > .git/info/exclude && echo new > toolz/extra.py")
        assert files_of(await lease.diff()) == ["toolz/extra.py"]


async def test_a_removed_baseline_is_refused_not_silently_replaced(client, fixture_instances):
    inst = fixture_instances[BUILD]
    async with client.lease(inst.image, workdir=inst.workdir) as lease:
        await lease.record_baseline()
        await lease.exec("rm -rf /tmp/.swe-rl/baseline")
        with pytest.raises(BadRequest, match="baseline"):
            await lease.diff()


async def test_the_same_patch_from_a_subdirectory_and_from_an_older_baseline(client, fixture_instances):
    """The diff skips `git rev-parse` when run from the work tree's top (recorded with the baseline); from
    elsewhere, or with a baseline recorded before `top` was kept, it asks git, with the same patch."""
    inst = fixture_instances[BUILD]
    async with client.lease(inst.image, workdir=inst.workdir) as lease:
        await lease.record_baseline()
        await lease.exec("echo new > toolz/extra.py")
        patch = await lease.diff()
        assert files_of(patch) == ["toolz/extra.py"]
        from_sub = await lease.exec(patch_baseline.DIFF_SCRIPT, workdir=f"{inst.workdir}/toolz")
        assert from_sub.returncode == 0 and from_sub.output == patch
        await lease.exec(f"rm {patch_baseline.BASELINE_DIR}/top")
        assert await lease.diff() == patch
        await lease.exec(f"rm -rf {patch_baseline.BASELINE_DIR}/objects/*")  # the baseline's tree is gone
        with pytest.raises(BadRequest, match="baseline was removed"):
            await lease.diff()


async def test_baseline_in_a_directory_without_git_is_a_clear_4xx(client, fixture_instances):
    inst = fixture_instances[BUILD]
    async with client.lease(inst.image, workdir="/tmp") as lease:
        with pytest.raises(BadRequest, match="cannot record a baseline"):
            await lease.record_baseline()


async def test_grader_records_a_baseline_in_the_grading_container(client, fixture_instances):
    """The grader's own diffs see the patch's effect only (the grading container has build/ too)."""
    inst = fixture_instances[BUILD]
    grade = await FleetGrader(client, GraderConfig()).grade(inst, inst.patch)
    assert grade.status is GradeStatus.RESOLVED and grade.apply_strategy == "git apply"
    assert "error:" not in grade.apply_output
