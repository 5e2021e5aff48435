"""The bundled fixture tasks (data/fixtures/) are real SWE-bench-style instances.

Static checks read ``instances.jsonl``. The Docker checks build the images with
``data/build_fixture_images.sh`` when missing and run each instance's eval script
in a fresh container: without a fix every FAIL_TO_PASS test fails and every
PASS_TO_PASS test passes; with the gold patch all of them pass.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "data" / "fixtures"
BUILD_SCRIPT = ROOT / "data" / "build_fixture_images.sh"
TEST_LABEL = {"swe-rl.test": "fixtures"}
RUN_TIMEOUT = 120

REQUIRED_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "environment_setup_commit",
    "created_at",
    "hints_text",
    "image_name",
    "eval_script",
    "workdir",
    "data_source",
)


def load_rows() -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / "instances.jsonl").read_text().splitlines() if line]


ROWS = load_rows()
IDS = [row["instance_id"] for row in ROWS]


def touched_files(patch: str) -> list[str]:
    """Files a git diff touches, in order."""
    return list(dict.fromkeys(re.findall(r"^diff --git a/(\S+) b/", patch, flags=re.MULTILINE)))


def parse_pytest_log(log: str) -> dict[str, str]:
    """Test id -> status from pytest's ``-rA`` summary (``PASSED path::name``, ``FAILED path::name - msg``)."""
    statuses = {}
    for line in log.splitlines():
        match = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line)
        if match:
            statuses[match.group(2)] = match.group(1)
    return statuses


# --- static checks ---------------------------------------------------------------------------


def test_at_least_four_instances_from_several_libraries():
    assert len(ROWS) >= 4
    assert len(set(IDS)) == len(IDS)
    assert len({row["repo"] for row in ROWS}) >= 2


def test_instances_jsonl_is_up_to_date():
    result = subprocess.run(
        ["python3", str(FIXTURES / "make_instances.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_row_has_swebench_fields(row):
    assert set(REQUIRED_FIELDS) <= set(row)
    for key in REQUIRED_FIELDS:
        if key != "hints_text":
            assert row[key], f"{key} is empty"
    assert re.fullmatch(r"[0-9a-f]{40}", row["base_commit"])
    assert re.fullmatch(r"[\w.-]+__[\w.-]+-9\d{3,}", row["instance_id"])
    expected_image = "swe-rl/fixture." + row["instance_id"].lower().replace("__", "_1776_") + ":latest"
    assert row["image_name"] == expected_image
    assert row["workdir"] == "/testbed"
    assert row["data_source"] == "swe-rl-fixtures"
    # The test lists are JSON-encoded strings, as in SWE-bench rows.
    assert isinstance(row["FAIL_TO_PASS"], str) and isinstance(row["PASS_TO_PASS"], str)
    fail_to_pass, pass_to_pass = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
    assert fail_to_pass and pass_to_pass
    assert not set(fail_to_pass) & set(pass_to_pass)
    test_files = touched_files(row["test_patch"])
    for test_id in fail_to_pass + pass_to_pass:
        assert test_id.split("::")[0] in test_files, test_id


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_gold_patch_and_test_patch_are_separate(row):
    gold, tests = set(touched_files(row["patch"])), set(touched_files(row["test_patch"]))
    assert gold and tests
    assert not gold & tests
    for path in gold:
        name = Path(path).name
        assert "tests" not in Path(path).parts and not name.startswith("test_"), path


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eval_script_is_swebench_style(row):
    script, base = row["eval_script"], row["base_commit"]
    test_files = " ".join(touched_files(row["test_patch"]))
    assert script.startswith("#!/bin/bash\n")
    assert "cd /testbed" in script
    assert script.count(f"git checkout {base} -- {test_files}") == 2
    assert "git apply -v - <<'EOF_114329324912'\n" + row["test_patch"] + "EOF_114329324912\n" in script
    assert f"pytest -rA {test_files}" in script


# --- real containers ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fixture_images(docker_client, base_image) -> None:
    missing = []
    for row in ROWS:
        try:
            docker_client.images.get(row["image_name"])
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
            missing.append(row["instance_id"])
    if missing:
        subprocess.run(
            ["bash", str(BUILD_SCRIPT), *missing],
            check=True,
            env={**os.environ, "SWE_BASE_IMAGE": base_image},
        )


def meta_of(row: dict) -> dict:
    return json.loads((FIXTURES / row["instance_id"] / "meta.json").read_text())


@pytest.fixture
def row_network(request, internal_network):
    """The network a row's tests run on: none, or (rows naming one) this session's internal network."""
    return internal_network if request.node.callspec.params["row"].get("network") else None


def run_in_fresh_container(client, image: str, script: str, network: str | None = None) -> tuple[int, str]:
    """Run a bash script in a new container (no network unless named) and return (exit code, output)."""
    net = {"network": network} if network else {"network_disabled": True}
    container = client.containers.create(
        image, ["bash", "-c", script], labels=TEST_LABEL, mem_limit="1g", pids_limit=512, **net
    )
    try:
        container.start()
        status = container.wait(timeout=RUN_TIMEOUT)
        return status["StatusCode"], container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)


def gold_then_eval(row: dict) -> str:
    return (
        "set -e\ncd /testbed\ngit apply -v - <<'GOLD_PATCH_EOF'\n" + row["patch"] + "GOLD_PATCH_EOF\n"
        "set +e\n" + row["eval_script"]
    )


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_image_head_is_the_base_commit_with_only_its_setup_untracked(docker_client, fixture_images, row):
    code, out = run_in_fresh_container(
        docker_client,
        row["image_name"],
        "cd /testbed && git rev-parse HEAD && git log --oneline | wc -l && git status --porcelain",
    )
    assert code == 0, out
    untracked = (
        ["??", "build/", "??", "toolz.egg-info/"]
        if "untracked-build-output" in meta_of(row).get("traits", [])
        else []
    )
    assert out.split() == [row["base_commit"], "1", *untracked]


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eval_without_fix_fails_fail_to_pass(docker_client, fixture_images, row, row_network):
    _, log = run_in_fresh_container(docker_client, row["image_name"], row["eval_script"], row_network)
    statuses = parse_pytest_log(log)
    for test_id in json.loads(row["FAIL_TO_PASS"]):
        assert statuses.get(test_id) in ("FAILED", "ERROR"), (test_id, statuses.get(test_id), log[-3000:])
    for test_id in json.loads(row["PASS_TO_PASS"]):
        assert statuses.get(test_id) == "PASSED", (test_id, statuses.get(test_id), log[-3000:])


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eval_with_gold_patch_passes_everything(docker_client, fixture_images, row, row_network):
    code, log = run_in_fresh_container(docker_client, row["image_name"], gold_then_eval(row), row_network)
    assert code == 0, log[-3000:]
    for path in touched_files(row["patch"]):
        assert f"Applied patch {path} cleanly." in log, log[-3000:]
    statuses = parse_pytest_log(log)
    for test_id in json.loads(row["FAIL_TO_PASS"]) + json.loads(row["PASS_TO_PASS"]):
        assert statuses.get(test_id) == "PASSED", (test_id, statuses.get(test_id), log[-3000:])


def test_network_fixture_gold_needs_the_network_trait(docker_client, fixture_images):
    """Without any network the connect fails at once (unreachable), so even the gold patch fails it."""
    row = next(r for r in ROWS if r.get("network"))
    _, log = run_in_fresh_container(docker_client, row["image_name"], gold_then_eval(row))
    f2p = json.loads(row["FAIL_TO_PASS"])
    assert parse_pytest_log(log).get(f2p[0]) == "FAILED", log[-3000:]


def test_new_fixture_traits_are_present():
    traits = {t for r in ROWS for t in meta_of(r).get("traits", [])}
    assert {"untracked-build-output", "needs-network", "flaky-test"} <= traits
