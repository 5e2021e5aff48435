"""Planting canaries in Go, node and cargo runs (`swe_rl.grading.language_canaries`): where the file goes,
what the log must show, and which commands get none. Their effect on real runs (gold keeps resolving, a
Go init() forging PASS lines is voided) is in tests/grading/test_multilang_fleet.py."""

from __future__ import annotations

import json
import random

import pytest

from swe_rl.grading.canaries import plan_canaries
from swe_rl.grading.language_canaries import plant_language_canaries
from swe_rl.tasks.rows import instance_from_row
from tests.conftest import ROOT

ROWS = {
    r["instance_id"]: r
    for r in (
        json.loads(x) for x in (ROOT / "data/fixtures/instances_multilang.jsonl").read_text().splitlines()
    )
}


def _plan(instance_id: str, command: str | None = None):
    row = dict(ROWS[instance_id])
    if command is not None:
        meta = json.loads((ROOT / "data/fixtures/multilang" / instance_id / "meta.json").read_text())
        row["eval_script"] = row["eval_script"].replace(meta["test_command"], command)
    instance = instance_from_row(row)
    script = instance.eval_script or ""
    return plant_language_canaries(
        plan_canaries(instance, script, random.Random(7)), instance, script, random.Random(7)
    )


@pytest.mark.parametrize(
    ("instance_id", "folder", "suffix"),
    [
        ("swe-rl__go-version-9001", "", "_test.go"),
        ("swe-rl__js-slugify-9001", "test/", ".test.js"),
        ("swe-rl__rust-stats-9001", "tests/", ".rs"),
    ],
)
def test_planted_before_the_run_and_removed_after(instance_id, folder, suffix):
    plan = _plan(instance_id)
    assert not plan.skipped and plan.canary_file.startswith(folder) and plan.canary_file.endswith(suffix)
    assert len(plan.must_pass) == len(plan.must_fail) == 2 and not set(plan.must_pass) & set(plan.must_fail)
    script = plan.script
    assert (
        script.index("} > " + plan.canary_file)
        < script.index("swe-rl run start")
        < script.index(f"rm -f {plan.canary_file}")
    )
    for name in plan.must_pass + plan.must_fail:
        assert name.removeprefix("- ") in plan.canary_source


@pytest.mark.parametrize(
    ("instance_id", "command"),
    [
        ("swe-rl__go-version-9001", "go test -v -run TestCompare ./..."),
        ("swe-rl__rust-stats-9001", "cargo test --lib"),
        ("swe-rl__rust-stats-9001", "cargo test median -- --test-threads=1"),
        ("swe-rl__js-slugify-9001", "npx jest --verbose"),
    ],
)
def test_selecting_commands_and_other_runners_get_none(instance_id, command):
    plan = _plan(instance_id, command)
    assert plan.skipped and not plan.canary_file and plan.nonce


def test_cargo_options_with_values_are_not_filters():
    plan = _plan("swe-rl__rust-stats-9001", "cargo test -p stats --features x --offline -- --test-threads=1")
    assert not plan.skipped, plan.skipped


def test_a_node_command_naming_files_names_the_canary_too():
    plan = _plan("swe-rl__js-slugify-9001", "node --test --test-reporter=tap test/slugify.test.js")
    assert f"test/slugify.test.js {plan.canary_file}" in plan.script
