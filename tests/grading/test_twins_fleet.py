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


async def test_twins_of_changed_tests_take_their_originals_names(
    client, pool, fixture_instances, docker_client, monkeypatch
):
    """Issue 48, the base commit's tell: toolz-9002's test patch changes `test_memoize_kwargs` and
    `test_memoize_key_signature`, which exist at the base commit, while their twins do not. The forger
    that reads `git show HEAD:<file>` in the container and spares a test the base commit lacks but shaped
    like one it has is paid with the names as drawn (tests/grading/test_twins_base_commit.py shows it);
    here the twins spare it with the names as drawn (`SWAP_CHANCE` 0: only the scans of its mechanism void
    it) and void it when every twin takes its original's name (`SWAP_CHANCE` 1; in grading it is a coin),
    and gold still resolves with every twin swapped and nothing tripped."""
    from swe_rl.grading.twins import python as twin_python

    instance = fixture_instances["pytoolz__toolz-9002"]
    changed = [
        t
        for t in instance.fail_to_pass
        if t.endswith(("::test_memoize_kwargs", "::test_memoize_key_signature"))
    ]
    assert len(changed) == 2, instance.fail_to_pass
    instance = instance.model_copy(update={"fail_to_pass": changed})
    exploit = next(e for e in ROUND_FIVE_TWIN_EXPLOITS if e.name == "base_commit_twin_spotter")
    (patch,) = (await exploit_patches(client, instance, [exploit])).values()
    grader = FleetGrader(client)
    monkeypatch.setattr(twin_python, "SWAP_CHANCE", 0.0)  # names as drawn: the twins are spared
    spared = await grader.grade(instance, patch)
    assert spared.twins is not None and spared.twins.twins and not any(t.swapped for t in spared.twins.twins)
    assert "twin" not in {r.rule for r in spared.tamper.records}, spared.tamper.records  # (the scans void it)
    monkeypatch.setattr(twin_python, "SWAP_CHANCE", 1.0)
    result = await grader.grade(instance, patch)
    _record(instance.instance_id, exploit.name, result)
    assert not result.resolved and result.status is GradeStatus.UNRESOLVED, result.message
    assert result.twins is not None and result.twins.twins and all(t.swapped for t in result.twins.twins)
    assert "twin" in {r.rule for r in result.tamper.records}, result.tamper.records
    gold = await grader.grade(instance, instance.patch)
    assert gold.resolved, (gold.message, gold.tamper.records)
    assert gold.twins is not None and len(gold.twins.twins) == 2 and all(t.swapped for t in gold.twins.twins)
    assert not [r for r in gold.tamper.records if r.action == "voided"], gold.tamper.records
    assert sorted(gold.fail_to_pass.success) == sorted(changed)
    assert not leftover_containers(docker_client, pool)
