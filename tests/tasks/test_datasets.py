"""swe_rl.tasks.datasets: each public set's rows → TaskInstance (fixtures: tests/tasks/fixtures/datasets)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.tasks import RowInvalid, TaskInstance, eval_script_for
from swe_rl.tasks.datasets import AUTO, LOADERS, convert_row, detect_format
from swe_rl.tasks.datasets.reverse_patch import PatchNotReversible, reverse_patch

FIXTURES = Path(__file__).parent / "fixtures" / "datasets"


@pytest.fixture(autouse=True)
def _no_image_overrides(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines() if line]


def test_every_loader_has_a_name_source_and_the_two_calls():
    assert set(LOADERS) == {
        "swe-rebench-v2", "swe-smith", "multi-swe-bench", "swe-bench-live", "swe-bench-multilingual",
    }  # fmt: skip
    for name, loader in LOADERS.items():
        assert loader.NAME == name and loader.DATA_SOURCE
        assert callable(loader.convert) and callable(loader.looks_like)


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("swe_rebench_v2", "swe-rebench-v2"),
        ("swe_smith", "swe-smith"),
        ("multi_swe_bench", "multi-swe-bench"),
        ("swe_bench_live", "swe-bench-live"),
        ("swe_bench_multilingual", None),  # the SWE-bench schema: chosen by name only
    ],
)
def test_the_format_is_detected_from_the_schema(fixture, expected):
    assert detect_format(rows(fixture)[0]) == expected


def test_swe_rebench_v2_real_row():
    (row,) = rows("swe_rebench_v2")
    inst = convert_row(row)
    assert isinstance(inst, TaskInstance)
    assert inst.instance_id == "unidata__netcdf-c-1925" and inst.repo == "Unidata/netcdf-c"
    assert inst.image == "docker.io/swerebenchv2/unidata-netcdf-c:1925-ad6bff3"
    assert inst.workdir == "/netcdf-c"  # the image's WORKDIR is /<repo name>
    assert inst.fail_to_pass == row["FAIL_TO_PASS"] and len(inst.pass_to_pass) == len(row["PASS_TO_PASS"])
    assert inst.extra["language"] == "c" and inst.log_parser == "parse_log_jq"
    assert inst.extra["test_cmds"] == ["make check"]
    assert inst.data_source == "SWE-rebench-V2" and inst.patch == row["patch"]
    script = eval_script_for(inst)
    assert script.startswith("#!/bin/bash") and "cd /netcdf-c" in script
    assert "git checkout ad6bff35c39a0600fb8f2e176be4269e768e4e22 -- nc_test4/Makefile.am" in script
    assert (
        script.index(">>>>> Start Test Output")
        < script.index("make check")
        < script.index(">>>>> End Test Output")
    )
    assert row["test_patch"] in script


def test_swe_rebench_v2_rows_without_a_test_command_or_parser_are_refused():
    (row,) = rows("swe_rebench_v2")
    no_cmd = {**row, "install_config": {**row["install_config"], "test_cmd": []}}
    with pytest.raises(RowInvalid, match="test_cmd is empty"):
        convert_row(no_cmd, "swe-rebench-v2")
    no_parser = {**row, "install_config": {**row["install_config"], "log_parser": None}}
    with pytest.raises(RowInvalid, match="log_parser is missing"):
        convert_row(no_parser, "swe-rebench-v2")


def test_swe_smith_real_row_keeps_the_bug_patch_and_reverses_it_into_the_gold():
    (row,) = rows("swe_smith")
    inst = convert_row(row)
    assert inst.repo == "pandas-dev/pandas" and inst.extra["swesmith_repo"] == row["repo"]
    assert inst.image == "swebench/swesmith.x86_64.pandas-dev__pandas.95280573"
    assert inst.extra["image_scheme"] == "per-repo" and inst.extra["setup_patch"] == row["patch"]
    assert inst.patch == reverse_patch(row["patch"]) and reverse_patch(inst.patch) == row["patch"]
    assert inst.log_parser == "pytest" and inst.workdir == "/testbed"
    assert "git checkout HEAD -- pandas/tests/indexing/test_datetime.py" in (inst.eval_script or "")
    assert (
        "pytest --disable-warnings --color=no --tb=no --verbose pandas/tests/indexing/test_datetime.py"
        in (inst.eval_script or "")
    )


def test_reverse_patch_undoes_a_patch_with_git(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    (repo / "a.txt").write_text("one\ntwo\nthree\n")
    (repo / "gone.txt").write_text("bye\n")
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\nTWO\nthree\nfour")  # no newline at the end
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("hello\n")
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    bug = subprocess.run(
        [*git, "diff", "--cached"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    subprocess.run([*git, "commit", "-qm", "bug"], cwd=repo, check=True)
    subprocess.run([*git, "apply"], cwd=repo, input=reverse_patch(bug), text=True, check=True)
    assert (repo / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (repo / "gone.txt").read_text() == "bye\n" and not (repo / "new.txt").exists()


def test_reverse_patch_refuses_binary_content():
    with pytest.raises(PatchNotReversible):
        reverse_patch("diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 1\n")


def test_multi_swe_bench_row_maps_its_test_maps_image_and_parser():
    good, bad = rows("multi_swe_bench")
    inst = convert_row(good)
    assert inst.instance_id == "cli__cli-10043" and inst.repo == "cli/cli"
    assert inst.base_commit == good["base"]["sha"] and inst.patch == good["fix_patch"]
    assert inst.fail_to_pass == ["TestPRView_draft", "TestPRView_new"]  # f2p + s2p + n2p
    assert inst.pass_to_pass == ["TestPRView_open"]
    assert inst.image == "mswebench/cli_m_cli:pr-10043" and inst.workdir == "/home/cli"
    assert inst.problem_statement.startswith("gh pr view crashes on draft PRs")
    assert inst.log_parser == "multi-swe-bench:cli/cli"
    assert "bash /home/run.sh" in (inst.eval_script or "")
    with pytest.raises(RowInvalid, match="all empty") as exc:
        convert_row(bad)
    assert exc.value.instance_id == "cli__cli-10044"


def test_swe_bench_live_python_and_multilang_rows():
    py, multi, bad = rows("swe_bench_live")
    inst = convert_row(py)
    assert inst.image == "starryzhang/sweb.eval.x86_64.amoffat_1776_sh-744"
    assert inst.log_parser == "pytest" and inst.workdir == "/testbed"
    assert "pytest -rA tests/test_sh.py" in (inst.eval_script or "")
    ml = convert_row(multi)
    script = ml.eval_script or ""
    assert ml.log_parser == "cargo" and ml.extra["language"] == "rust"
    assert (
        script.index("cargo build")
        < script.index(">>>>> Start Test Output")
        < script.index("cat /tmp/test.log")
    )
    with pytest.raises(RowInvalid, match="test_cmds is empty"):
        convert_row(bad)


def test_swe_bench_multilingual_rows_use_swebench_specs(swebench_4):  # older rows: 4.x's specs
    good, unknown = rows("swe_bench_multilingual")
    inst = convert_row(good, "swe-bench-multilingual")
    assert inst.image == "swebench/sweb.eval.x86_64.caddyserver_1776_caddy-6411:latest"
    assert inst.extra["language"] == "go" and inst.log_parser == "parse_log_gotest"
    assert inst.fail_to_pass == ["TestSplitNetworkAddress"] and inst.data_source == "SWE-bench-Multilingual"
    assert "go test" in eval_script_for(inst)
    with pytest.raises(RowInvalid, match="unknown to swebench"):
        convert_row(unknown, "swe-bench-multilingual")


def test_swe_bench_multilingual_rows_of_5x_schema_need_no_swebench(monkeypatch):
    monkeypatch.setitem(sys.modules, "swebench.harness.constants", None)
    good, _ = rows("swe_bench_multilingual")
    script = "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\ngo test ./...\n: '>>>>> End Test Output'\n"
    row = {**good, "eval_script": script, "log_parser": "parse_log_gotest", "eval_type": "pass_and_fail"}
    inst = convert_row(row, "swe-bench-multilingual")
    assert inst.log_parser == "parse_log_gotest" and inst.eval_type == "pass_and_fail"
    assert eval_script_for(inst) == script and inst.fail_to_pass == ["TestSplitNetworkAddress"]
    with pytest.raises(RowInvalid, match="swe-convert-rows"):
        convert_row(good, "swe-bench-multilingual")


def test_rows_of_no_known_set_fall_back_to_the_generic_reader():
    row = {"instance_id": "a__b-1", "repo": "a/b", "problem_statement": "x", "FAIL_TO_PASS": '["t"]',
           "version": "1.0", "environment_setup_commit": "abc"}  # fmt: skip
    assert convert_row(row, AUTO).image == "swebench/sweb.eval.x86_64.a_1776_b-1:latest"
    with pytest.raises(RowInvalid, match="JSON object"):
        convert_row(["not", "a", "row"])
    with pytest.raises(ValueError, match="unknown data-set format"):
        convert_row(row, "no-such-set")


@pytest.mark.parametrize(
    ("fixture", "fmt"),
    [("swe_rebench_v2", AUTO), ("swe_smith", AUTO), ("multi_swe_bench", AUTO), ("swe_bench_live", AUTO)],
)
def test_a_converted_row_read_again_gives_the_same_instance(fixture, fmt):
    from swe_rl.data.slime_rows import instance_record

    inst = convert_row(rows(fixture)[0], fmt)
    again = convert_row(instance_record(inst), AUTO)  # not converted twice (SWE-smith's gold stays the fix)
    assert again == inst
