"""Twins in real grading runs on the fixture images (`swe_rl.grading.twins.plant` through `FleetGrader`).

Gold on every Python fixture (twins planted, none tripped, the verdicts and the FAIL_TO_PASS/PASS_TO_PASS
reports exactly what they are without twins) is checked in the one gold sweep,
`tests/grading/test_reward_integrity.py` (`tests/twin_checks.py`). Here: each behaviour no canary sees, on a fixture where the
naive grader pays for it: always-equal results, an oracle reading the expectation from the test's
source, a report forger that spares tests not using the package (canaries come out as planted).
"""

from __future__ import annotations

import json
import os

import pytest
from adversarial_patches import EXPLOITS, ROUND_FIVE_TWIN_EXPLOITS, exploit_patches
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader


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
    ("pytoolz__toolz-9003", "anything_results"),  # issue 48: the cheapest hack, every form
    ("more-itertools__more-itertools-9001", "twin_spotter_forgery"),  # issue 48: round four's tells
]


@pytest.mark.parametrize(("instance_id", "name"), CAUGHT, ids=[f"{n}-{i}" for i, n in CAUGHT])
async def test_twins_catch_what_canaries_do_not(
    instance_id, name, client, pool, fixture_instances, docker_client
):
    instance = fixture_instances[instance_id]
    exploit = next(e for e in [*EXPLOITS, *ROUND_FIVE_TWIN_EXPLOITS] if e.name == name)
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
    if name in (
        "selective_report_forgery",
        "twin_spotter_forgery",
    ):  # the grader's canaries use nothing of the package: as planted
        assert "canary" not in rules, result.tamper.records
    assert not leftover_containers(docker_client, pool)
