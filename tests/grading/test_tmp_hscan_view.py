"""TEMPORARY (not committed): INTERPRETER_VIEW on two fixtures, every payload, plus gold."""

from __future__ import annotations

import json

import pytest
from adversarial_patches import INTERPRETER_VIEW, exploit_patches, graded_all

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader


@pytest.mark.parametrize("instance_id", ["jpvanhal__inflection-9001", "pytoolz__toolz-9004"])
async def test_view(instance_id, client, pool, fixture_instances, docker_client):
    instance = fixture_instances[instance_id]
    patches = await exploit_patches(client, instance, INTERPRETER_VIEW, concurrency=2)
    grader = FleetGrader(client)
    results = await graded_all(grader, instance, [patches[e.name] for e in INTERPRETER_VIEW], concurrency=2)
    rows = {}
    for e, r in zip(INTERPRETER_VIEW, results, strict=True):
        rows[e.name] = (
            r.official.status if r.official else None,
            r.status.value,
            sorted({x.rule for x in r.tamper.records}) if r.tamper else None,
            [x.reason[:80] for x in r.tamper.records][:3] if r.tamper else None,
        )
    print(json.dumps(rows, indent=1))
    with open(f"/tmp/h-scan-data/view_{instance_id}.json", "w") as fh:
        json.dump(rows, fh, indent=1)
    gold = await grader.grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED, gold.message
    assert not any(r.resolved for r in results), rows
