"""Planting canaries in Go, node and cargo runs (`swe_rl.grading.canaries.languages`): where the file goes,
what the log must show, and which commands get none. Their effect on real runs (gold keeps resolving, a
Go init() forging PASS lines is voided) is in tests/grading/test_multilang_fleet.py."""

from __future__ import annotations

import json
import random
import shlex

import pytest

from swe_rl.grading.canaries.languages import plant_language_canaries
from swe_rl.grading.canaries.log_audit import start_token
from swe_rl.grading.canaries.plan import CanaryPlan, check_canaries, plan_canaries
from swe_rl.grading.parsers import PARSERS
from swe_rl.tasks.eval_scripts import RUN_END_MARKER, RUN_START_MARKER
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
        ("swe-rl__js-slugify-9001", "test/", ".test.cjs"),  # a row whose test patch defines no FAIL_TO_PASS
        ("swe-rl__rust-stats-9001", "tests/", ".rs"),  # a row whose test patch has no tests/<name>.rs
    ],
)
def test_planted_before_the_run_and_removed_after(instance_id, folder, suffix):
    if not instance_id.startswith("swe-rl__go"):  # (else the canaries join a test file of the test patch)
        row = dict(ROWS[instance_id])
        row["test_patch"] = row["test_patch"].replace("tests/median.rs", "tests/unit/median.rs")
        if instance_id.startswith("swe-rl__js"):
            row["FAIL_TO_PASS"] = '["- a test the test patch does not touch"]'
        instance = instance_from_row(row)
        script = instance.eval_script or ""
        plan = plant_language_canaries(
            plan_canaries(instance, script, random.Random(7)), instance, script, random.Random(7)
        )
        assert (
            plan.canary_file not in ("tests/unit/median.rs", "test/slugify.test.js") and not plan.append_block
        )
    else:
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
        ("swe-rl__go-version-9001", "GOFLAGS=-run=TestCompare go test -v ./..."),
        ("swe-rl__go-version-9001", "GOFLAGS='-mod=mod -failfast' go test -v ./..."),
        ("swe-rl__go-version-9001", "GOEXPERIMENT=x GO111MODULE=off go test -v ./..."),
        ("swe-rl__go-version-9001", "GO111MODULE=maybe go test -v ./..."),
        ("swe-rl__rust-stats-9001", "cargo test --lib"),
        ("swe-rl__rust-stats-9001", "cargo test median -- --test-threads=1"),
        ("swe-rl__js-slugify-9001", "npx jest --verbose"),
    ],
)
def test_selecting_commands_and_other_runners_get_none(instance_id, command):
    plan = _plan(instance_id, command)
    assert plan.skipped and not plan.canary_file and plan.nonce


@pytest.mark.parametrize(
    "command",
    ["GO111MODULE=off go test -v -count=1 ./...", "CGO_ENABLED=0 GOFLAGS='-mod=vendor' go test -v ./..."],
)
def test_a_go_command_with_plain_assignments_gets_canaries_and_the_grader_s_go_commands_take_them(command):
    """The mined set's go-version rows run ``GO111MODULE=off go test`` (GOPATH mode): a plain run of every
    test. The canaries join it, and the grader's own go commands of the run (the twins' compile check,
    the probe's queries) start with the same assignments; a module-mode query would fail alike on both
    trees and see nothing."""
    from swe_rl.grading.languages import go_command_env
    from swe_rl.grading.runner.probe_languages import plan_language_probe

    plan = _plan("swe-rl__go-version-9001", command)
    assert not plan.skipped and plan.canary_file, plan.skipped
    prefix, rest = go_command_env(shlex.split(command)) or ("?", [])
    assert plan.command_env == prefix and prefix.strip() and rest[:2] == ["go", "test"]
    row = dict(ROWS["swe-rl__go-version-9001"])
    row["eval_script"] = row["eval_script"].replace("go test -v -count=1 ./...", command)
    probe = plan_language_probe(instance_from_row(row), row["eval_script"], random.Random(3))
    queries = [ln for ln in probe.run_script.split("\n") if "### go " in ln]
    assert len(queries) == 3 and all(f"; {prefix}go " in ln for ln in queries), queries


def test_cargo_options_with_values_are_not_filters():
    plan = _plan("swe-rl__rust-stats-9001", "cargo test -p stats --features x --offline -- --test-threads=1")
    assert not plan.skipped, plan.skipped


def test_a_node_command_naming_files_names_the_canary_too():
    plan = _plan("swe-rl__js-slugify-9001", "node --test --test-reporter=tap test/slugify.test.js")
    assert f"test/slugify.test.js {plan.canary_file}" in plan.script


SHIM = "cat > /tmp/mocha-globals.cjs <<'SHIM'\nglobalThis.it = require('node:test').it;\nSHIM\n"


@pytest.mark.parametrize(
    ("setup", "planted"),
    [
        (SHIM, True),  # the mined mocha rows: a shim of mocha's names written under /tmp, then node's runner
        (SHIM.replace("/tmp/mocha-globals.cjs", "test/setup.cjs"), False),  # a file in the tree: refused
        ("python3 - <<'PY'\nprint(1)\nPY\n", False),  # a heredoc that runs something: refused
        (SHIM + "echo ready\n", False),  # another command before the runner: refused
    ],
)
def test_a_node_run_after_a_shim_written_under_tmp_gets_canaries_and_nothing_else_does(setup, planted):
    """The 24 mined mocha rows write a shim of mocha's global names to /tmp (a heredoc) and run
    ``node --test --require`` it on their test files: the heredoc is set-up, the command a plain node run,
    so the canaries join it (named on its command line). Any other command or heredoc still refuses."""
    command = "node --test --test-reporter=tap --require /tmp/mocha-globals.cjs test/slugify.test.js"
    plan = _plan("swe-rl__js-slugify-9001", setup + command)
    assert bool(plan.canary_file) is planted and bool(plan.skipped) is not planted, plan.skipped
    if planted:
        assert f"{command} {plan.canary_file}" in plan.script and setup in plan.script


# A cargo test run (the rust fixture's gold, three pytest-xdist workers at load ~10): cargo's stderr
# interleaved with the test binary's stdout mid-line, so `fjord_nectar`'s own result line does not parse.
INTERLEAVED_CARGO = """running 4 tests
test basalt_zephyr ... ok
test fjord_nectar ... error: test failed, to rerun pass `--test meadow_tundra`
     Running tests/median.rs (target/debug/deps/median-77afb56a8ff4063f)
FAILED
test lagoon_yarrow ... FAILED
test umber_quartz ... ok

failures:

---- fjord_nectar stdout ----
thread 'main' panicked at 'assertion failed: 574 == 916', tests/meadow_tundra.rs:15:5

---- lagoon_yarrow stdout ----
thread 'main' panicked at 'assertion failed: 341 * 822 == 280303', tests/meadow_tundra.rs:11:5


failures:
    fjord_nectar
    lagoon_yarrow

test result: FAILED. 2 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

running 3 tests
test median_of_odd_sample ... ok

test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
"""


def _cargo_run(body: str, nonce: str = "n0nce") -> str:
    return f"{RUN_START_MARKER} {start_token(nonce)}\n{body}{RUN_END_MARKER} {nonce} exit 101\n"


def test_a_failed_canary_whose_result_line_interleaved_is_still_seen_failed():
    """Gold was voided once for this ("a canary that must fail was not reported"); libtest's failure
    listing says what the mangled line did not. The official parse stays swebench's (no fjord_nectar)."""
    plan = CanaryPlan(
        script="",
        nonce="n0nce",
        runner="cargo",
        must_pass=["basalt_zephyr", "umber_quartz"],
        must_fail=["fjord_nectar", "lagoon_yarrow"],
    )
    log = _cargo_run(INTERLEAVED_CARGO)
    statuses = PARSERS["parse_log_cargo"](log)
    assert "fjord_nectar" not in statuses  # what swebench's parser sees too
    check = check_canaries(plan, statuses, log)
    assert not check.tripped, check.reasons


def test_a_failure_listing_never_passes_a_canary_or_reports_one_that_did_not_run():
    """The listing only ever says FAILED, and only for must-fail canaries: a must-pass canary named there
    is still not passed; a must-fail canary absent from the whole run is still missing (tampering)."""
    plan = CanaryPlan(
        script="",
        nonce="n0nce",
        runner="cargo",
        must_pass=["basalt_zephyr", "fjord_nectar"],
        must_fail=["quiet_canary"],
    )
    log = _cargo_run(INTERLEAVED_CARGO)
    check = check_canaries(plan, PARSERS["parse_log_cargo"](log), log)
    assert check.tripped
    assert any("must fail was not reported: quiet_canary" in r for r in check.reasons), check.reasons
    assert any("fjord_nectar" in r for r in check.reasons), check.reasons


def test_a_node_row_without_test_patch_plants_beside_a_file_its_command_names_as_commonjs():
    """An injected-bug row (empty test patch) of a "type": "module" package whose tests are not under
    test/: the canary goes beside the first test file the command names (no folder to be missing),
    as ``.cjs`` (its ``require`` works whatever the package's type)."""
    row = dict(ROWS["swe-rl__js-slugify-9001"], test_patch="")
    meta = json.loads((ROOT / "data/fixtures/multilang/swe-rl__js-slugify-9001/meta.json").read_text())
    command = "node --test --test-reporter=tap dist/esm/test/version.test.js"
    row["eval_script"] = row["eval_script"].replace(meta["test_command"], command)
    instance = instance_from_row(row)
    script = instance.eval_script or ""
    plan = plant_language_canaries(
        plan_canaries(instance, script, random.Random(7)), instance, script, random.Random(7)
    )
    assert not plan.skipped and plan.canary_file.startswith("dist/esm/test/")
    assert plan.canary_file.endswith(".test.cjs") and f"version.test.js {plan.canary_file}" in plan.script


def test_a_go_row_without_test_patch_plants_beside_the_test_file_the_grader_found():
    """An injected-bug Go row (empty test patch, the tree's own tests judge it) had no canary, hence no
    runner check either: an in-process filter of the ``--- FAIL`` lines was paid on a real row
    (google/uuid). The canary (and the check it carries) now goes beside the test file the grader
    searched out for the FAIL_TO_PASS tests (`twins.plant.search_patterns`)."""
    instance = instance_from_row(dict(ROWS["swe-rl__go-version-9001"], test_patch=""))
    script = instance.eval_script or ""
    alone = plant_language_canaries(plan_canaries(instance, script), instance, script, random.Random(1))
    assert alone.skipped == "the test patch has no *_test.go file" and not alone.canary_file
    found = ["README.md", "internal/semver/version_test.go", "other_test.go"]
    plan = plant_language_canaries(
        plan_canaries(instance, script), instance, script, random.Random(1), guard="/tmp/g/guard", found=found
    )
    assert not plan.skipped and plan.canary_file.startswith("internal/semver/zz_")
    assert plan.canary_file.endswith("_test.go") and "internal/semver/version_test.go" in plan.script
    assert '"/tmp/g/guard"' in plan.canary_source and len(plan.must_pass) == 2
