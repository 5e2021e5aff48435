"""What a gold grading must show of the twins (`swe_rl.grading.twins.plant`), checked wherever gold is graded
through `FleetGrader` on the Python fixtures (the gold sweep of `tests/grading/test_reward_integrity.py`)."""

from __future__ import annotations

from swe_rl.grading.canaries.log_audit import status_lines
from swe_rl.tasks import TaskInstance

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
"""The fixtures whose tests twins are planted beside (every bundled Python fixture)."""


def assert_twins_planted_and_silent(instance: TaskInstance, gold) -> None:
    """Twins were planted, each ran and failed, and they count for nothing: the FAIL_TO_PASS/PASS_TO_PASS
    reports are exactly the task's and no twin's name appears among the graded tests."""
    iid = instance.instance_id
    if iid not in PYTHON_FIXTURES:
        return
    assert gold.twins is not None and gold.twins.twins, (iid, gold.twins)
    assert sorted(gold.fail_to_pass.success) == sorted(instance.fail_to_pass), iid
    assert sorted(gold.pass_to_pass.success) == sorted(instance.pass_to_pass), iid
    assert not any(
        t.test_id.split("::", 1)[1] in test for t in gold.twins.twins for test in gold.tests_status
    )
    ran = {(line.test.split("[")[0], line.status) for line in status_lines(gold.test_log)}
    for twin in gold.twins.twins:
        assert (twin.test_id, "FAILED") in ran, (iid, twin)
    print(
        iid,
        "twins planted",
        len(gold.twins.twins),
        "swapped",
        sum(t.swapped for t in gold.twins.twins),
        "skipped",
        [s.reason for s in gold.twins.skipped],
    )
