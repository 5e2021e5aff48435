"""swe_rl.tasks.pass_rates: attempts → per-instance pass rates → the band an instance falls in."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from swe_rl.tasks.pass_rates import (
    Attempt,
    PassRate,
    PassRateBand,
    PassRateTable,
    append_attempts,
    read_attempts,
)


def test_attempts_append_and_read_back_with_eval_results_rows_mixed_in(tmp_path):
    path = tmp_path / "attempts.jsonl"
    assert (
        append_attempts(path, [Attempt(instance_id="a", resolved=True, policy_version="v1", source="train")])
        == 1
    )
    with path.open("a") as fh:
        fh.write('{"torn": \n')
        for status in ("resolved", "unresolved", "no_patch", "env_error", "eval_timeout"):
            fh.write(json.dumps({"instance_id": "b", "status": status}) + "\n")
    attempts = list(read_attempts(path))
    assert attempts[0].at > 0 and attempts[0].source == "train"
    assert [(a.instance_id, a.resolved) for a in attempts] == [
        ("a", True),
        ("b", True),
        ("b", False),
        ("b", False),
    ]
    assert {a.source for a in attempts[1:]} == {"eval"}  # env_error / eval_timeout say nothing of the policy
    assert {a.policy_version for a in read_attempts(path, policy_version="v9")} == {"v9"}
    with pytest.raises(FileNotFoundError):
        list(read_attempts(tmp_path / "missing.jsonl"))


def test_pass_rates_per_instance_overall_and_per_policy_version():
    table = PassRateTable.from_attempts(
        [
            Attempt(instance_id="x", resolved=r, policy_version=v)
            for v, r in [("v1", False), ("v1", True), ("v2", True)]
        ]
    )
    assert table.get("x").rate == pytest.approx(2 / 3)
    assert table.get("x", "v1") == PassRate(attempts=2, resolved=1)
    assert table.get("x", "v3").rate is None and table.get("unknown").attempts == 0
    assert len(table) == 1


@pytest.mark.parametrize(
    ("attempts", "resolved", "verdict"),
    [
        (4, 0, "never solved"),
        (4, 4, "always solved"),
        (4, 2, None),
        (10, 1, "outside the band"),
        (0, 0, None),
    ],
)
def test_the_default_band_drops_always_0_and_always_1(attempts, resolved, verdict):
    band = PassRateBand(min_rate=0.2)
    assert band.verdict(PassRate(attempts=attempts, resolved=resolved)) == verdict


def test_unseen_instances_can_be_dropped_and_bands_must_be_ordered():
    band = PassRateBand(min_attempts=3, keep_unseen=False)
    assert band.verdict(PassRate(attempts=2, resolved=1)) == "fewer than 3 attempt(s)"
    with pytest.raises(ValidationError, match="above max_rate"):
        PassRateBand(min_rate=0.8, max_rate=0.2)
