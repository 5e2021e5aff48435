"""Twins on the Go, JavaScript and Rust fixtures in real grading runs: gold trips none (each twin ran and
failed); package code that games the tests without forging anything a canary sees — a Go init() re-running
its test binary and rewriting the task-like results (and a Rust function doing the same), node:assert's
equality checks replaced, a Rust type whose PartialEq is always true — is paid by the naive grader and
voided by a twin."""

from __future__ import annotations

import pytest
from adversarial_multilang import exploits_for, play
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader
from tests.grading.test_multilang_fleet import IDS, multilang_instances  # noqa: F401 - the session fixture
from tests.grading.test_twins_fleet import _record

FAILED_LINE = {  # how each runner reports a failed test, by language
    "swe-rl__go-version-9001": lambda line, name: f"--- FAIL: {name} " in line,
    "swe-rl__js-slugify-9001": lambda line, name: line.startswith("not ok ") and line.endswith(f" - {name}"),
    "swe-rl__rust-stats-9001": lambda line, name: line == f"test {name} ... FAILED",
}
CAUGHT = [
    ("swe-rl__go-version-9001", "go_selective_rerun_forgery"),
    ("swe-rl__js-slugify-9001", "js_assert_replaced"),
    ("swe-rl__rust-stats-9001", "rust_partialeq_always_true"),
    ("swe-rl__rust-stats-9001", "rust_selective_rerun_forgery"),
]


@pytest.mark.parametrize("instance_id", IDS)
async def test_gold_trips_no_twin(
    instance_id,
    client,
    pool,
    multilang_instances,  # noqa: F811 - the imported session fixture
    docker_client,
):
    instance = multilang_instances[instance_id]
    gold = await FleetGrader(client).grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED and gold.official.resolved, gold.message
    assert gold.tamper is not None and not gold.tamper.records, gold.tamper
    assert gold.twins is not None and gold.twins.twins and not gold.twins.skipped, gold.twins
    for twin in gold.twins.twins:
        name, failed = twin.test_id.rsplit("::", 1)[-1].removeprefix("- "), FAILED_LINE[instance_id]
        assert any(failed(line.strip(), name) for line in gold.test_log.split("\n")), (
            twin,
            gold.test_log[-3000:],
        )
        assert twin.test_id not in gold.tests_status
    assert sorted(gold.fail_to_pass.success) == sorted(instance.fail_to_pass)
    assert not leftover_containers(docker_client, pool)


@pytest.mark.parametrize(("instance_id", "name"), CAUGHT, ids=[n for _, n in CAUGHT])
async def test_gaming_package_code_is_voided_by_a_twin(
    instance_id,
    name,
    client,
    pool,
    multilang_instances,  # noqa: F811 - the imported session fixture
    docker_client,
):
    instance = multilang_instances[instance_id]
    exploit = next(e for e in exploits_for(instance) if e.name == name)
    (patch,) = (await play(client, instance, [exploit])).values()
    result = await FleetGrader(client).grade(instance, patch)
    assert result.official is not None and result.official.resolved, (
        "the naive grader should pay",
        result.official,
    )
    assert not result.resolved and result.status is GradeStatus.UNRESOLVED, result.message
    rules = {r.rule for r in result.tamper.records}
    _record(instance_id, exploit.name, result)
    assert "twin" in rules, (result.tamper.records, result.twins, result.test_log[-3000:])
    assert "canary" not in rules, result.tamper.records  # the canaries came out as planted
    assert not leftover_containers(docker_client, pool)
