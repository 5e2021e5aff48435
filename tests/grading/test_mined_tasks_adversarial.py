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
from adversarial_patches import EXPLOITS, FULL_MATRIX

from swe_rl.grading.integrity import patch_paths
from swe_rl.tasks import instance_from_row
from tests.grading.test_mined_tasks import RELEASE_SAMPLE, release_images  # noqa: F401 - a fixture
from tests.grading.test_real_tasks_adversarial import gold_clean_and_no_exploit_paid

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
    test_file = patch_paths(instance.test_patch)[0]  # a release row always has its own test patch
    await gold_clean_and_no_exploit_paid(
        row, instance, test_file, PYTHON_EXPLOITS, client, pool, docker_client
    )
