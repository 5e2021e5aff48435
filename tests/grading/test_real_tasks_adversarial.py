"""The project's adversarial suite on the real-task set (data/real_tasks/instances.jsonl), through the fleet.

On one row per language by default (every row with ``SWE_TEST_FULL_MATRIX=1``): gold resolves under the
integrity verdict with nothing recorded (no rule, no canary, twin or runner-probe trip), and no exploit
earns a reward — for Python every third exploit of tests/adversarial_patches.py (`EXPLOITS`; all of them
under the full matrix), for Go,
JavaScript and Rust every one of tests/adversarial_multilang.py. The fixtures' suites were written
against clean test repositories; real rows have real layouts (tests under ``dist/*/test/``, a test patch
that is empty because the task is an injected bug judged by the tests already there), which is what this
checks. The images come from data/real_tasks/build.sh (test_real_tasks' fixture: once per machine).
"""

from __future__ import annotations

import subprocess

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

from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import patch_paths
from swe_rl.tasks import TaskInstance, instance_from_row
from tests.grading.test_real_tasks import ROWS, real_images  # noqa: F401 - real_images: a fixture


def _one_per_language() -> list[dict]:
    """The first row of each language, in the file's order (the fastest Python row: toolz)."""
    chosen: dict[str, dict] = {}
    for row in ROWS:
        language = row.get("language", "python")
        if language == "python" and "toolz" not in row["repo"]:
            continue
        chosen.setdefault(language, row)
    return list(chosen.values())


PLAYED = ROWS if FULL_MATRIX else _one_per_language()
# Every third Python exploit on a real row by default (all 35 play on every Python fixture already; here the
# point is the real layout, and all 35 on the toolz row cost 13 minutes of a loaded machine).
PYTHON_EXPLOITS = EXPLOITS if FULL_MATRIX else EXPLOITS[::3]


def _tree_test_file(instance: TaskInstance, language: str) -> str:
    """A test file for the exploits to sit beside: the test patch's, else one the eval script names,
    else the first of the image's tree (an injected-bug row has no test patch)."""
    if paths := patch_paths(instance.test_patch):
        return paths[0]
    rule = LANGUAGES[language]
    named = [w for w in (instance.eval_script or "").split() if rule.is_test(w)]
    if named:
        return named[-1]
    files = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", "swe-rl.test=real-tasks", instance.image,
         "git", "-C", instance.workdir or "/testbed", "ls-files"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout.split()  # fmt: skip
    return next(f for f in files if rule.is_test(f) and f.endswith(rule.source_suffixes))


def test_one_row_per_language_is_played_by_default():
    languages = {row.get("language", "python") for row in _one_per_language()}
    assert languages == {"python", "go", "javascript", "rust"}


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("row", PLAYED, ids=[r["instance_id"] for r in PLAYED])
async def test_gold_is_clean_and_no_exploit_earns_a_reward_on_real_rows(
    row,
    real_images,  # noqa: F811 - the imported fixture
    client,
    pool,
    docker_client,
):
    instance = instance_from_row(row)
    language = row.get("language", "python")
    test_file = _tree_test_file(instance, language)
    await gold_clean_and_no_exploit_paid(
        row, instance, test_file, PYTHON_EXPLOITS, client, pool, docker_client
    )


async def gold_clean_and_no_exploit_paid(
    row: dict, instance, test_file: str, python_exploits: list, client, pool, docker_client
) -> None:
    """Gold resolves with nothing recorded, and no exploit of the suite (Python's `python_exploits`, or
    the row language's own, played beside `test_file`) earns a reward; no container is left. Shared by
    the real-task and the mined-set suites."""
    grader = FleetGrader(client)
    gold = await grader.grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED and gold.official and gold.official.resolved, gold.message
    assert gold.tamper is not None and not gold.tamper.records, gold.tamper  # no rule, twin or probe trip

    if row.get("language", "python") == "python":
        patches = await exploit_patches(client, instance, python_exploits, concurrency=2, test_file=test_file)
        names = [e.name for e in python_exploits]
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
