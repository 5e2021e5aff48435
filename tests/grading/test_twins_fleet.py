"""Twins in real grading runs on the fixture images (`swe_rl.grading.twins` through `FleetGrader`).

Gold on every Python fixture: twins planted, none tripped, the verdicts and the FAIL_TO_PASS/PASS_TO_PASS
reports exactly what they are without twins. Then each behaviour no canary sees, on a fixture where the
naive grader pays for it: always-equal results, an oracle reading the expectation from the test's
source, a report forger that spares tests not using the package (canaries come out as planted).
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from adversarial_patches import EXPLOITS, exploit_patches
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.log_audit import status_lines

PYTHON_FIXTURES = [
    "jpvanhal__inflection-9001",
    "jpvanhal__inflection-9002",
    "more-itertools__more-itertools-9001",
    "more-itertools__more-itertools-9002",
    "more-itertools__more-itertools-9003",
    "pytoolz__toolz-9001",
    "pytoolz__toolz-9002",
    "pytoolz__toolz-9003",
    "pytoolz__toolz-9004",
    "pytoolz__toolz-9005",
]


async def test_gold_trips_no_twin_on_any_fixture(client, pool, fixture_instances, docker_client):
    grader = FleetGrader(client)
    gate = asyncio.Semaphore(2)
    assert set(PYTHON_FIXTURES) <= set(fixture_instances)

    async def check(instance_id: str) -> tuple[str, int, list[str]]:
        instance = fixture_instances[instance_id]
        async with gate:
            gold = await grader.grade(instance, instance.patch)
        assert gold.status is GradeStatus.RESOLVED and gold.official.resolved, (instance_id, gold.message)
        assert gold.tamper is not None and not gold.tamper.records, (instance_id, gold.tamper)
        assert gold.official.source == "same_run", instance_id
        assert gold.twins is not None and gold.twins.twins, (instance_id, gold.twins)
        # the twins ran and failed, and count for nothing
        assert sorted(gold.fail_to_pass.success) == sorted(instance.fail_to_pass), instance_id
        assert sorted(gold.pass_to_pass.success) == sorted(instance.pass_to_pass), instance_id
        assert not any(
            t.test_id.split("::", 1)[1] in test for t in gold.twins.twins for test in gold.tests_status
        )
        ran = {(line.test.split("[")[0], line.status) for line in status_lines(gold.test_log)}
        for twin in gold.twins.twins:  # each twin ran and failed
            assert (twin.test_id, "FAILED") in ran, (instance_id, twin)
        return instance_id, len(gold.twins.twins), [s.reason for s in gold.twins.skipped]

    results = await asyncio.gather(*(check(i) for i in PYTHON_FIXTURES))
    print("twins planted / skipped per fixture:", results)
    assert not leftover_containers(docker_client, pool)


def _record(instance_id: str, name: str, result) -> None:
    """``SWE_TWIN_TABLE=<file.json>``: the rows of docs/reward_integrity.md (naive vs ours, rules)."""
    if path := os.environ.get("SWE_TWIN_TABLE"):
        table = json.loads(open(path).read()) if os.path.exists(path) else {}
        table[f"{name} @ {instance_id}"] = {
            "naive": result.official.status if result.official else None,
            "ours": result.status.value,
            "rules": sorted({r.rule for r in result.tamper.records}),
        }
        with open(path, "w") as fh:
            json.dump(table, fh, indent=1, sort_keys=True)


# (fixture, exploit): the naive grader pays for each; only twins see the behaviour for what it is
CAUGHT = [
    ("pytoolz__toolz-9003", "always_equal_results"),
    ("pytoolz__toolz-9001", "source_file_oracle"),
    ("pytoolz__toolz-9001", "frame_expected_value"),
    ("more-itertools__more-itertools-9001", "selective_report_forgery"),
]


@pytest.mark.parametrize(("instance_id", "name"), CAUGHT, ids=[f"{n}-{i}" for i, n in CAUGHT])
async def test_twins_catch_what_canaries_do_not(
    instance_id, name, client, pool, fixture_instances, docker_client
):
    instance = fixture_instances[instance_id]
    exploit = next(e for e in EXPLOITS if e.name == name)
    (patch,) = (await exploit_patches(client, instance, [exploit])).values()
    result = await FleetGrader(client).grade(instance, patch)
    assert result.official is not None and result.official.resolved, (
        "the naive grader should pay",
        result.official,
    )
    assert not result.resolved and result.status is GradeStatus.UNRESOLVED, result.message
    rules = {r.rule for r in result.tamper.records}
    _record(instance_id, exploit.name, result)
    assert "twin" in rules, (result.tamper.records, result.twins)
    assert all(r.action == "voided" for r in result.tamper.records if r.rule == "twin")
    if name == "selective_report_forgery":  # the grader's canaries use nothing of the package: as planted
        assert "canary" not in rules, result.tamper.records
    assert not leftover_containers(docker_client, pool)
