"""The named networks a --local-fleet run (eval, certify, grade) has its local fleet make and allow."""

from __future__ import annotations

from argparse import Namespace

import pytest

from swe_rl.eval.grading_hooks import local_fleet_networks
from tests.conftest import ROOT

BUNDLED = Namespace(
    data=str(ROOT / "data" / "fixtures" / "instances.jsonl"), image_template=None, split="test"
)


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        ((None,), ["swe-rl-internal"]),  # what the bundled rows name (pytoolz__toolz-9004)
        ((), ["swe-rl-internal"]),
        (("none",), []),  # the run chose no network for every container
        (("default",), []),  # Docker's bridge is not a named network
        (("mynet",), ["mynet"]),
        (("none", None), ["swe-rl-internal"]),  # grading isolated, the agent's containers on the row's
        (("mynet", "othernet"), ["mynet", "othernet"]),
    ],
)
def test_the_run_choices_else_the_rows(chosen, expected):
    assert local_fleet_networks(BUNDLED, *chosen) == expected


def test_a_missing_data_file_is_a_clear_error(tmp_path):
    args = Namespace(data=str(tmp_path / "nope.jsonl"), image_template=None, split="test")
    with pytest.raises((FileNotFoundError, ValueError), match="nope.jsonl"):
        local_fleet_networks(args, None)
