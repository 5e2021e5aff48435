"""The project's adversarial suite on the mined set's release-anchored rows, through the fleet (CI runs it).

The rows' images are built from releases CI downloads (test_mined_tasks' `release_images`: once per
machine). On one row by default (every release row with ``SWE_TEST_FULL_MATRIX=1``): gold resolves
under the integrity verdict with nothing recorded (no rule, canary, twin or runner-probe trip), and
no exploit earns a reward. Python exploits are tests/adversarial_patches.py's `EXPLOITS`, every
sixth by default (a few minutes of a loaded machine; every one under the full matrix), played beside
the row's own test file, as test_real_tasks_adversarial does on the real-task set.
"""

from __future__ import annotations

import pytest
from adversarial_multilang import exploits_for, play
from adversarial_patches import (
    EXPLOITS,
    FULL_MATRIX,
    assert_no_environment_failure,
    environment_failures,
    exploit_patches,
    graded_all,
)
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import patch_paths
from swe_rl.tasks import instance_from_row
from tests.grading.test_mined_tasks import RELEASE_SAMPLE, release_images  # noqa: F401 - a fixture

PLAYED = RELEASE_SAMPLE if FULL_MATRIX else RELEASE_SAMPLE[:1]
PYTHON_EXPLOITS = EXPLOITS if FULL_MATRIX else EXPLOITS[::6]


def test_the_default_plays_one_release_row_with_a_spread_of_exploits():
    assert len(PLAYED) == 1 or FULL_MATRIX
    assert len(PYTHON_EXPLOITS) >= 5 and len({e.name for e in PYTHON_EXPLOITS}) == len(PYTHON_EXPLOITS)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("row", PLAYED, ids=[r["instance_id"] for r in PLAYED])
async def test_gold_is_clean_and_no_exploit_earns_a_reward_on_release_rows(
    row,
    release_images,  # noqa: F811 - the imported fixture
    client,
    pool,
    docker_client,
):
    instance = instance_from_row(row)
    grader = FleetGrader(client)
    gold = await grader.grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED and gold.official and gold.official.resolved, gold.message
    assert gold.tamper is not None and not gold.tamper.records, gold.tamper  # no rule, twin or probe trip

    test_file = patch_paths(instance.test_patch)[0]  # a release row always has its own test patch
    if row["language"] == "python":
        patches = await exploit_patches(client, instance, PYTHON_EXPLOITS, concurrency=2, test_file=test_file)
        names = [e.name for e in PYTHON_EXPLOITS]
    else:
        exploits = exploits_for(instance, test_file)
        patches = await play(client, instance, exploits)
        names = [e.name for e in exploits]
    results = await graded_all(grader, instance, [patches[n] for n in names], concurrency=2)
    assert_no_environment_failure(environment_failures(names, results))
    earned = []
    for name, result in zip(names, results, strict=True):
        if result.resolved:
            earned.append((name, result.status.value, result.message))
        elif (
            result.official is not None
            and result.official.resolved
            and result.tamper is not None
            and not result.tamper.records
            and result.status is not GradeStatus.PATCH_APPLY_FAILED
        ):
            earned.append((name, "paid officially, nothing recorded", result.official.message))
    print(row["instance_id"], len(names), "exploits, earned:", earned)
    assert not earned, earned
    assert not leftover_containers(docker_client, pool)
