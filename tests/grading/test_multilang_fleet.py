"""Go, JavaScript and Rust fixtures graded end to end on real containers through the fleet (`FleetGrader`):
gold resolves (officially and under integrity, nothing dropped), the empty patch is no_patch with the
tests really failing, a patch that breaks the build runs no test and never resolves, and no exploit of
tests/adversarial_multilang.py earns a reward under the integrity verdict."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from adversarial_multilang import exploits_for, play
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader
from swe_rl.tasks import TaskInstance, load_instances
from tests.conftest import ROOT

MULTILANG_JSONL = ROOT / "data" / "fixtures" / "instances_multilang.jsonl"
IDS = ["swe-rl__go-version-9001", "swe-rl__js-slugify-9001", "swe-rl__rust-stats-9001"]
BREAK_BUILD = {
    "swe-rl__go-version-9001": "echo 'func broken( {' >> version.go",
    "swe-rl__js-slugify-9001": "echo 'module.exports = (;' >> src/slugify.js",
    "swe-rl__rust-stats-9001": "echo 'pub fn broken( {' >> src/lib.rs",
}


@pytest.fixture(scope="session")
def multilang_instances(docker_client, base_image) -> dict[str, TaskInstance]:
    loaded = load_instances(MULTILANG_JSONL)
    assert loaded.ok, loaded.errors
    missing = []
    for inst in loaded.instances:
        try:
            docker_client.images.get(inst.image)
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
            missing.append(inst.instance_id)
    if missing:
        subprocess.run(["bash", str(ROOT / "data/build_multilang_images.sh"), *missing], check=True)
    return {inst.instance_id: inst for inst in loaded.instances}


@pytest.mark.parametrize("instance_id", IDS)
async def test_gold_resolves_empty_and_broken_do_not(
    instance_id, client, pool, multilang_instances, docker_client
):
    instance = multilang_instances[instance_id]
    grader = FleetGrader(client)
    gold = await grader.grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED, gold.message
    assert gold.official is not None and gold.official.resolved and gold.official.source == "same_run"
    assert gold.tamper is not None and not gold.tamper.records
    assert gold.method.endswith(getattr(instance, "log_parser", None) or instance.extra["log_parser"])

    empty = await grader.grade(instance, "")
    assert empty.status is GradeStatus.NO_PATCH

    (broken,) = (await play(client, instance, [_shell("break_build", BREAK_BUILD[instance_id])])).values()
    result = await grader.grade(instance, broken)
    assert result.status is GradeStatus.UNRESOLVED, result.message
    assert not result.official.resolved
    assert not any(result.tests_status.get(t) == "PASSED" for t in instance.fail_to_pass)
    assert not leftover_containers(docker_client, pool)


def _shell(name: str, script: str):
    from adversarial_patches import Exploit

    return Exploit(name, name, script + "\n")


PARTS = 2
"""Each fixture's exploits in two tests the workers share (Rust's nine, graded one by one, were the
suite's longest test: ~10 minutes of a loaded machine on one worker)."""


@pytest.mark.parametrize("part", range(PARTS))
@pytest.mark.parametrize("instance_id", IDS)
async def test_no_language_exploit_earns_a_reward(
    instance_id, part, client, pool, multilang_instances, docker_client
):
    instance = multilang_instances[instance_id]
    exploits = exploits_for(instance)[part::PARTS]
    assert exploits
    patches = await play(client, instance, exploits)
    grader = FleetGrader(client)
    earned, table = [], {}
    for exploit in exploits:
        result = await grader.grade(instance, patches[exploit.name])
        assert result.official is not None and result.tamper is not None, exploit.name
        table[exploit.name] = (
            result.official.status,
            result.status.value,
            sorted({r.rule for r in result.tamper.records}),
        )
        if result.resolved or result.status is GradeStatus.ENV_ERROR:
            earned.append((exploit.name, result.status.value, result.message))
        if (
            result.official.resolved
            and not result.tamper.records
            and result.status is not GradeStatus.PATCH_APPLY_FAILED
        ):
            earned.append((exploit.name, "paid officially, nothing recorded", result.official.message))
    print(instance_id, table)
    assert not earned, earned
    assert not leftover_containers(docker_client, pool)


PROBE_ALONE = {  # one class-2 exploit per language; every one with SWE_TEST_FULL_MATRIX=1
    "swe-rl__go-version-9001": ["go_work", "go_mod_replace"],
    "swe-rl__js-slugify-9001": ["js_npmrc_preload", "js_pretest_script", "js_package_json_scripts"],
    "swe-rl__rust-stats-9001": ["rust_cargo_runner", "rust_cargo_env", "rust_cargo_toml_profile"],
}


@pytest.mark.parametrize("instance_id", IDS)
async def test_the_probe_voids_what_the_tree_rules_miss(
    instance_id, client, pool, multilang_instances, docker_client, monkeypatch
):
    """With the tree rules made blind (the whole canonical patch reaches the run, nothing recorded), the
    runner probe alone voids a runner-configuration exploit of the language; `rust_cargo_runner`, which
    the official verdict pays, is paid with the probe off too (the exploit is real)."""
    from swe_rl.grading import pipeline
    from swe_rl.grading.config import GraderConfig
    from swe_rl.grading.integrity import IntegrityConfig

    instance = multilang_instances[instance_id]
    names = PROBE_ALONE[instance_id]
    if os.environ.get("SWE_TEST_FULL_MATRIX") != "1":
        names = names[:1]
    exploits = [e for e in exploits_for(instance) if e.name in names]
    patches = await play(client, instance, exploits)
    real = pipeline.judge_tree

    def blind(canon, *args, **kwargs):
        return real(canon, *args, **kwargs).model_copy(update={"patch": canon.text, "records": []})

    monkeypatch.setattr(pipeline, "judge_tree", blind)
    for exploit in exploits:
        result = await FleetGrader(client).grade(instance, patches[exploit.name])
        probe = [r for r in result.tamper.records if r.rule == "runner_probe"]
        print(exploit.name, result.official.status, result.status.value, [r.reason for r in probe])
        assert not result.resolved, (exploit.name, result.message)
        assert probe and all(r.action == "voided" for r in probe), (exploit.name, result.tamper.records)
        if exploit.name == "rust_cargo_runner":
            off = GraderConfig(integrity=IntegrityConfig(runner_probe=False))
            unprobed = await FleetGrader(client, off).grade(instance, patches[exploit.name])
            assert unprobed.official.resolved, ("the exploit did not work: nothing to show", unprobed.message)
    assert not leftover_containers(docker_client, pool)


CHECK_ALONE = {  # issue 48 item 8: one exploit per language; every one with SWE_TEST_FULL_MATRIX=1
    "swe-rl__go-version-9001": ["go_fd1_filtered_in_process", "go_stdout_filtered_in_process"],
    "swe-rl__js-slugify-9001": ["js_strict_assert_through_helper", "js_module_written_at_run_time"],
    "swe-rl__rust-stats-9001": ["rust_report_forged_in_process", "rust_included_text_module"],
}


@pytest.mark.parametrize("instance_id", IDS)
async def test_the_runner_check_alone_voids(
    instance_id, client, pool, multilang_instances, docker_client, monkeypatch
):
    """With the tree rules and the capability scan made blind, the runner's own check inside the test run
    (`runner.machinery`) voids a round-five exploit of the language: a Go test binary filtering its own
    stdout, a lax `node:assert/strict` reached through a helper, a libtest report forged in process."""
    from swe_rl.grading import pipeline
    from swe_rl.grading.scans.capabilities import CapabilityReport

    instance = multilang_instances[instance_id]
    names = CHECK_ALONE[instance_id]
    if os.environ.get("SWE_TEST_FULL_MATRIX") != "1":
        names = names[:1]
    exploits = [e for e in exploits_for(instance) if e.name in names]
    patches = await play(client, instance, exploits)
    real = pipeline.judge_tree

    def blind(canon, *args, **kwargs):
        return real(canon, *args, **kwargs).model_copy(update={"patch": canon.text, "records": []})

    monkeypatch.setattr(pipeline, "judge_tree", blind)
    monkeypatch.setattr(pipeline, "scan_changes", lambda *args, **kwargs: CapabilityReport())
    for exploit in exploits:
        result = await FleetGrader(client).grade(instance, patches[exploit.name])
        check = [
            r
            for r in result.tamper.records
            if r.rule == "runner_probe" and r.action == "voided" and "configuration" not in r.reason
        ]
        print(
            exploit.name,
            result.official.status,
            result.status.value,
            [r.reason for r in result.tamper.records],
        )
        assert not result.resolved, (exploit.name, result.message)
        assert check, (exploit.name, result.tamper.records)
    assert not leftover_containers(docker_client, pool)


async def test_a_go_command_in_gopath_mode_gets_canaries_twins_and_the_runner_check(
    client, pool, multilang_instances, docker_client
):
    """A row whose test command starts with ``GO111MODULE=off`` (the mined set's go-version rows: GOPATH
    mode for code from before go.mod) is graded with every Go stage: the canary file and the runner check
    it carries, twins whose compile check runs in the same mode, and the probe's queries. Before, such a
    command was refused as not a plain `go test`: no canary, no runner check, no twin, and a test binary
    filtering its own stdout was paid on those rows."""
    fixture = multilang_instances["swe-rl__go-version-9001"]
    command = "go test -v -count=1 ./..."
    assert command in fixture.eval_script
    instance = fixture.model_copy(
        update={"eval_script": fixture.eval_script.replace(command, f"GO111MODULE=off {command}")}
    )
    grader = FleetGrader(client)
    gold = await grader.grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED and gold.tamper is not None, gold.message
    assert not gold.tamper.records, gold.tamper.records
    assert gold.twins is not None and gold.twins.twins and not gold.twins.refused, gold.twins
    assert all(c.startswith("GO111MODULE=off go test") for c in gold.twins.checks.values()), gold.twins
    twin_ids = {t.test_id for t in gold.twins.twins}
    assert twin_ids and all(f"--- FAIL: {t} " in gold.test_log for t in twin_ids), "a twin did not run"
    [exploit] = [e for e in exploits_for(instance) if e.name == "go_fd1_filtered_in_process"]
    patch = (await play(client, instance, [exploit]))[exploit.name]
    result = await grader.grade(instance, patch)
    assert not result.resolved, result.message
    assert any(r.rule == "runner_probe" and r.action == "voided" for r in result.tamper.records), (
        result.tamper.records
    )
    assert not leftover_containers(docker_client, pool)


async def test_a_node_run_after_a_mocha_shim_gets_canaries_and_gold_stays_clean(
    client, pool, multilang_instances, docker_client
):
    """The mined mocha rows' command shape (a shim of mocha's names written to /tmp by a heredoc, then
    ``node --test --require`` it on named files), on the JS fixture: the canary file joins the run, its
    must-fail canaries are reported failed, and gold resolves with nothing recorded."""
    fixture = multilang_instances["swe-rl__js-slugify-9001"]
    command = "node --test --test-reporter=tap test/"
    assert command in fixture.eval_script
    shim = "cat > /tmp/mocha-globals.cjs <<'SHIM'\nglobalThis.it = require('node:test').it;\nSHIM\n"
    runs = f"{shim}node --test --test-reporter=tap --require /tmp/mocha-globals.cjs test/slugify.test.js"
    instance = fixture.model_copy(update={"eval_script": fixture.eval_script.replace(command, runs)})
    gold = await FleetGrader(client).grade(instance, instance.patch)
    assert gold.status is GradeStatus.RESOLVED and gold.tamper is not None, gold.message
    assert not gold.tamper.records, gold.tamper.records
    failed_canaries = re.findall(r"location: '/testbed/test/[a-z]+-[a-z]+\.test\.cjs:", gold.test_log)
    assert len(failed_canaries) == 2, gold.test_log[-3000:]  # the two must-fail canaries ran and failed
    assert not leftover_containers(docker_client, pool)
