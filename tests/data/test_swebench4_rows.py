"""4.x-schema rows (public SWE-bench Verified: no eval_script) in one step: the tools convert them with
swebench 4.1.0 from its own folder, install it there on demand, and, when that cannot run, name the exact
command and write nothing (swe_rl.tasks.swebench4)."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from swe_rl.data.convert_rows import main as convert_main
from swe_rl.data.preprocess_swe_dataset import main as preprocess_main
from swe_rl.eval.certify import main as certify_main
from swe_rl.eval.eval_swe import main as eval_main
from swe_rl.tasks.swebench4 import install_command
from tests.swebench_versions import side_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from task_rows import fixture_row, swebench_row

pytestmark = pytest.mark.slow  # child interpreters and pip: seconds

needs_side = pytest.mark.skipif(
    not (side_folder() / "swebench" / "__init__.py").is_file(),
    reason=f"swebench 4.1.0 is not in {side_folder()} (bash scripts/install_package.sh puts it there)",
)


@pytest.fixture
def as_under_5x(monkeypatch):
    """This process as with the pinned 5.x (4.x's specs not importable), whatever is installed."""
    monkeypatch.setitem(sys.modules, "swebench.harness.constants", None)


@pytest.fixture
def no_package_index(monkeypatch, tmp_path):
    """pip finds nothing (no index, an empty find-links folder, no config files): an install fails."""
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    return empty


def rows_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_conversion_that_cannot_run_names_the_command_and_writes_nothing(
    tmp_path, monkeypatch, capsys, as_under_5x, no_package_index
):
    folder = tmp_path / "swebench-4.1.0"
    monkeypatch.setenv("SWE_SWEBENCH4_DIR", str(folder))
    src, dst = rows_file(tmp_path / "verified.jsonl", [swebench_row()]), tmp_path / "out.jsonl"
    assert convert_main([str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert f"installing swebench==4.1.0 into {folder}" in err  # it tried, saying so
    assert shlex.join(install_command(folder)) in err and "run the same command again" in err
    assert not dst.exists() and not folder.exists() and list(tmp_path.glob("swebench-4.1.0*")) == []
    # swe-preprocess: the same message, no output at all
    out_dir = tmp_path / "slime"
    err_io = io.StringIO()
    status = preprocess_main(
        ["--train-data-source", str(src), "--output-dir", str(out_dir)], out=io.StringIO(), err=err_io
    )
    assert status == 2 and shlex.join(install_command(folder)) in err_io.getvalue()
    assert not out_dir.exists() or not any(out_dir.iterdir())
    # swe-eval on the rows file: exit 2 before any run folder is written
    run_dir = tmp_path / "run"
    assert (
        eval_main(["--data", str(src), "--policy", "gold", "--output-dir", str(run_dir), "--no-progress"])
        == 2
    )
    assert shlex.join(install_command(folder)) in capsys.readouterr().err
    assert not run_dir.exists()
    # swe-certify reads rows the same way: exit 2, the same command, no ledger
    ledger = tmp_path / "ledger.jsonl"
    assert certify_main(["run", "--data", str(src), "--ledger", str(ledger), "--no-progress"]) == 2
    assert shlex.join(install_command(folder)) in capsys.readouterr().err
    assert not ledger.exists()


@needs_side
def test_swe_convert_rows_converts_4x_rows_in_one_step(tmp_path, capsys, as_under_5x):
    src = rows_file(tmp_path / "verified.jsonl", [swebench_row(), fixture_row()])
    dst = tmp_path / "converted.jsonl"
    assert convert_main([str(src), str(dst)]) == 0, capsys.readouterr().err
    old, fixture = (json.loads(x) for x in dst.read_text().splitlines())
    assert "test_requests.py" in old["eval_script"] and old["log_parser"] == "parse_log_requests"
    assert old["image"] == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert fixture["eval_script"] == fixture_row()["eval_script"]


@needs_side
def test_swe_certify_reads_4x_rows_as_swe_eval_does(tmp_path, capsys, as_under_5x):
    """One code path (`swe_rl.eval.run_data`): certify's instances are eval's, 4.x rows converted."""
    from swe_rl.eval import certify

    src = rows_file(tmp_path / "verified.jsonl", [swebench_row(), fixture_row()])
    given = certify.load_given(certify.parse_args(["run", "--data", str(src), "--ledger", "l.jsonl"]))
    assert "converting them with swebench==4.1.0" in capsys.readouterr().err
    old, fixture = given
    assert "test_requests.py" in old.eval_script and old.log_parser == "parse_log_requests"
    assert old.image == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert fixture.eval_script == fixture_row()["eval_script"]


@needs_side
def test_swe_preprocess_converts_4x_rows_itself(tmp_path, as_under_5x):
    src = rows_file(tmp_path / "verified.jsonl", [swebench_row(), fixture_row()])
    out, err = io.StringIO(), io.StringIO()
    status = preprocess_main(
        ["--train-data-source", str(src), "--output-dir", str(tmp_path / "slime")], out=out, err=err
    )
    assert status == 0, err.getvalue()
    assert "1 row(s) without eval_script: converting them with swebench==4.1.0" in err.getvalue()
    rows = [json.loads(x) for x in (tmp_path / "slime/train.jsonl").read_text().splitlines()]
    assert [r["metadata"]["instance"]["instance_id"] for r in rows] == [
        "psf__requests-2317",
        "pytoolz__toolz-9001",
    ]
    converted = rows[0]["metadata"]["instance"]
    assert "test_requests.py" in converted["eval_script"] and converted["log_parser"] == "parse_log_requests"


@needs_side
def test_a_missing_side_folder_is_installed_on_demand_saying_so(
    tmp_path, monkeypatch, capsys, as_under_5x, no_package_index
):
    """pip installs 4.1.0 into the folder when missing (here from a wheel made of the set-up's folder, offline)."""
    wheel = no_package_index / "swebench-4.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in side_folder().rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(side_folder()).as_posix())
    folder = tmp_path / "cache" / "swebench-4.1.0"
    monkeypatch.setenv("SWE_SWEBENCH4_DIR", str(folder))
    src, dst = rows_file(tmp_path / "verified.jsonl", [swebench_row()]), tmp_path / "out.jsonl"
    assert convert_main([str(src), str(dst)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert (
        f"installing swebench==4.1.0 into {folder}" in err
        and f"installed swebench==4.1.0 into {folder}" in err
    )
    assert (folder / "swebench" / "__init__.py").is_file() and json.loads(dst.read_text())["eval_script"]
    shutil.rmtree(folder)
