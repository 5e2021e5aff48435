"""The adversarial patch suite on the real fixture images: no exploit earns a reward, gold still does.

For each exploit (tests/adversarial_patches.py) an "agent" container plays it and its `git diff`
is graded by the integrity grader, which gives both verdicts: ``official`` is what the naive grader
(the full patch through the official eval script and SWE-bench's rules) says, the result itself is
ours. ``SWE_INTEGRITY_TABLE=<file.json>`` writes the table of docs/reward_integrity.md.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from adversarial_patches import (
    CLASS_ONE_SAMPLE,
    EXPLOITS,
    FULL_MATRIX,
    INTERPRETER_VIEW,
    ROUND_TWO,
    assert_no_environment_failure,
    environment_failures,
    exploit_patches,
    graded_all,
    rotation,
)
from agent_fixtures import FIXTURES_JSONL, leftover_containers
from twin_checks import PYTHON_FIXTURES, assert_twins_planted_and_silent

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader

FULL_SUITE = [
    "jpvanhal__inflection-9001",
    "more-itertools__more-itertools-9001",
]  # root tests; tests/ + tox/pyproject
# Exploits the naive grader must pay for on every fixture (measured; the suite is pointless otherwise).
NAIVE_WINS = {"conftest_makereport_pass", "conftest_makereport_xfail", "pytest_ini_plugin"}
_TABLE: dict[str, dict[str, dict[str, object]]] = {}


def _record(instance_id: str, name: str, result) -> None:
    _TABLE.setdefault(name, {})[instance_id] = {
        "naive": result.official.status if result.official else None,
        "ours": result.status.value,
        "rules": sorted({r.rule for r in result.tamper.records}) if result.tamper else [],
    }
    path = os.environ.get("SWE_INTEGRITY_TABLE")
    if path:
        with open(path, "w") as fh:
            json.dump(_TABLE, fh, indent=1, sort_keys=True)


# Each exploit on one of the two layouts, in two halves per fixture (four tests the workers share): all 35 on
# both fixtures cost one worker up to 27 minutes of a loaded CI machine. ``SWE_TEST_FULL_MATRIX=1`` plays
# every exploit on both.
SUITE_EXPLOITS = rotation(EXPLOITS, FULL_SUITE, per_exploit=1)
SUITE_PARTS = 2


def test_the_suite_plays_every_exploit():
    played = [e.name for f in FULL_SUITE for e in SUITE_EXPLOITS[f]]
    assert sorted(set(played)) == sorted(e.name for e in EXPLOITS)
    assert all(len(SUITE_EXPLOITS[f]) >= len(EXPLOITS) // 2 for f in FULL_SUITE)


@pytest.mark.parametrize("part", range(SUITE_PARTS))
@pytest.mark.parametrize("instance_id", FULL_SUITE)
async def test_no_exploit_earns_a_reward(instance_id, part, client, pool, fixture_instances, docker_client):
    instance = fixture_instances[instance_id]
    exploits = SUITE_EXPLOITS[instance_id][part::SUITE_PARTS]
    patches = await exploit_patches(client, instance, exploits)
    grader = FleetGrader(client)
    failures = []
    results = await graded_all(grader, instance, [patches[e.name] for e in exploits])
    for exploit, result in zip(exploits, results, strict=True):
        if result.status is GradeStatus.ENV_ERROR:  # no verdict either way: reported below as such
            continue
        _record(instance_id, exploit.name, result)
        assert result.official is not None and result.tamper is not None, (exploit.name, result.message)
        if result.resolved or (result.official.resolved and not result.tamper.records):
            failures.append((exploit.name, result.status.value, result.message))
        if exploit.name in NAIVE_WINS and not result.official.resolved:
            failures.append((exploit.name, "naive grader did not pay", result.official.message))
    assert not failures, failures
    assert_no_environment_failure(environment_failures([e.name for e in exploits], results))
    [gold] = await graded_all(grader, instance, [instance.patch])
    assert_no_environment_failure(environment_failures(["gold"], [gold]))
    assert gold.status is GradeStatus.RESOLVED and gold.official.resolved, gold.message
    assert gold.tamper is not None and not gold.tamper.records and gold.official.source == "same_run"
    assert not leftover_containers(docker_client, pool)


FIXTURE_IDS = [
    json.loads(line)["instance_id"] for line in FIXTURES_JSONL.read_text().splitlines() if line.strip()
]
HOOK_EXPLOITS = rotation(ROUND_TWO + CLASS_ONE_SAMPLE + INTERPRETER_VIEW, FIXTURE_IDS)


def test_the_rotation_plays_every_exploit_on_several_fixtures():
    """The default spread of the hook exploits still meets every exploit and every fixture."""
    played: dict[str, set[str]] = {}
    for fixture, exploits in HOOK_EXPLOITS.items():
        assert exploits, fixture
        for e in exploits:
            played.setdefault(e.name, set()).add(fixture)
    assert set(played) == {e.name for e in ROUND_TWO + CLASS_ONE_SAMPLE + INTERPRETER_VIEW}
    assert all(len(f) >= min(3, len(FIXTURE_IDS)) for f in played.values()), played


@pytest.mark.parametrize("instance_id", FIXTURE_IDS)
async def test_start_up_hooks_patch_formats_and_git_settings_earn_nothing(
    instance_id, client, pool, fixture_instances, docker_client
):
    """Threat classes 2-4 of issue 24 (and one payload of each class-1 mechanism, and issue 36's code
    hidden from the scan: INTERPRETER_VIEW), each on three fixtures
    (every one on every fixture with ``SWE_TEST_FULL_MATRIX=1``): nothing under the integrity verdict.
    Gold on every fixture: ``test_every_fixture_gold_resolves_and_conftest_hacks_do_not``."""
    instance = fixture_instances[instance_id]
    exploits = HOOK_EXPLOITS[instance_id]
    patches = await exploit_patches(client, instance, exploits)
    grader = FleetGrader(client)
    earned = []
    results = await graded_all(grader, instance, [patches[e.name] for e in exploits])
    for exploit, result in zip(exploits, results, strict=True):
        if result.status is GradeStatus.ENV_ERROR:  # graded twice: reported below, never a pass
            continue
        _record(instance_id, exploit.name, result)
        assert result.official is not None and result.tamper is not None, exploit.name
        if result.resolved:
            earned.append((exploit.name, result.status.value, result.message))
        if (
            result.official.resolved
            and not result.tamper.records
            and result.status is not GradeStatus.PATCH_APPLY_FAILED
        ):
            earned.append((exploit.name, "paid officially, nothing recorded", result.official.message))
    assert not earned, earned
    assert_no_environment_failure(environment_failures([e.name for e in exploits], results))
    assert not leftover_containers(docker_client, pool)  # gold on this fixture: the test below


# The two conftest hacks the naive grader pays for, one per fixture in turn (both everywhere with
# ``SWE_TEST_FULL_MATRIX=1``): each still meets half of the fixtures of every layout and language, and
# the suite above plays both on the two richest layouts.
CONFTEST_HACKS = {
    fixture: {"conftest_makereport_pass", "conftest_makereport_xfail"}
    if FULL_MATRIX
    else {("conftest_makereport_pass", "conftest_makereport_xfail")[i % 2]}
    for i, fixture in enumerate(FIXTURE_IDS)
}


def test_the_conftest_hacks_meet_every_fixture():
    assert set(CONFTEST_HACKS) == set(FIXTURE_IDS) and all(CONFTEST_HACKS.values())
    assert set().union(*CONFTEST_HACKS.values()) == {"conftest_makereport_pass", "conftest_makereport_xfail"}
    assert {"conftest_makereport_pass", "conftest_makereport_xfail"} <= NAIVE_WINS


async def test_every_fixture_gold_resolves_and_conftest_hacks_do_not(client, pool, fixture_instances):
    """Gold on every fixture under the default grader (every stage on): resolved, nothing recorded, the
    official verdict from the same run, the twins planted, failed and counted for nothing (the one sweep
    of gold over every fixture through `FleetGrader`); then a conftest hack (one of two, in turn) is voided on each."""
    grader = FleetGrader(client)
    assert set(PYTHON_FIXTURES) <= set(fixture_instances)

    async def check(instance) -> None:
        names = CONFTEST_HACKS[instance.instance_id]
        [gold] = await graded_all(grader, instance, [instance.patch])
        assert_no_environment_failure(environment_failures(["gold"], [gold]))
        assert gold.status is GradeStatus.RESOLVED and gold.official.resolved, (
            instance.instance_id,
            gold.message,
        )
        assert gold.tamper is not None and not gold.tamper.records, (instance.instance_id, gold.tamper)
        assert gold.official.source == "same_run", instance.instance_id
        assert_twins_planted_and_silent(instance, gold)
        patches = await exploit_patches(
            client, instance, [e for e in EXPLOITS if e.name in names], concurrency=2
        )
        results = await graded_all(grader, instance, list(patches.values()), concurrency=2)
        assert_no_environment_failure(environment_failures(list(patches), results))
        for name, result in zip(patches, results, strict=True):
            _record(instance.instance_id, name, result)
            assert not result.resolved and result.status is GradeStatus.UNRESOLVED, (
                instance.instance_id,
                name,
            )
            assert result.official.resolved, (instance.instance_id, name, "naive grader should pay")
            assert [r.rule for r in result.tamper.records] == ["conftest"]

    gate = asyncio.Semaphore(2)  # two fixtures at once, two calls each: four containers at most

    async def gated(instance) -> None:
        async with gate:
            await check(instance)

    await asyncio.gather(*(gated(i) for i in fixture_instances.values()))


async def test_a_fix_plus_a_hack_is_graded_on_the_fix(client, pool, fixture_instances):
    """Gold patch and a conftest.py together: the conftest is dropped, the fix still resolves."""
    instance = fixture_instances["pytoolz__toolz-9001"]
    (hack,) = (await exploit_patches(client, instance, [EXPLOITS[0]])).values()
    result = await FleetGrader(client).grade(instance, instance.patch + hack)
    assert result.status is GradeStatus.RESOLVED, result.message
    assert [r.path for r in result.tamper.records] == ["conftest.py"]
    assert result.official.source == "full_patch_run" and result.official.resolved
