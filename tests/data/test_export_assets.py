"""data/export_swebench_verified_assets.py: instance ids, image list and eval rows in one go."""

from __future__ import annotations

import pytest
from row_factories import (
    FIXTURE_INSTANCES,
    load_tool,
    read_jsonl,
    run_tool,
    swebench_row,
    write_jsonl,
)

from swe_rl.tasks import load_instances

pytestmark = pytest.mark.slow  # runs the tool as a subprocess, as users do

TOOL = "export_swebench_verified_assets.py"
IDS = ["django__django-11099", "astropy__astropy-12907", "sympy__sympy-20590"]


@pytest.fixture(autouse=True)
def _no_image_overrides(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)


def verified_rows() -> list:
    """Three SWE-bench Verified-like rows, two bad rows and a duplicate."""
    return [
        swebench_row(IDS[0], repo="django/django", version="3.0"),
        swebench_row(IDS[1], repo="astropy/astropy", version="4.3"),
        '{"instance_id": ',
        swebench_row("psf__requests-1", problem_statement=None),
        swebench_row(IDS[2], repo="sympy/sympy", version="1.7"),
        swebench_row(IDS[0], repo="django/django", version="3.0"),
    ]


def export(tmp_path, *args: str):
    out = tmp_path / "verified"
    return run_tool(TOOL, "--output-dir", out, *args), out


def test_exports_ids_images_and_eval_rows(tmp_path):
    src = write_jsonl(tmp_path / "verified.jsonl", verified_rows())
    proc, out = export(tmp_path, "--dataset", src, "--split", "test")
    assert proc.returncode == 0, proc.stderr
    assert "exported 3 instance(s), 3 image(s)" in proc.stdout and "3 bad row(s) skipped" in proc.stdout
    assert "line 3: invalid JSON" in proc.stderr and "line 6 (django__django-11099): duplicate" in proc.stderr

    assert (out / "instance_ids.txt").read_text() == "".join(f"{i}\n" for i in IDS)
    assert (out / "docker_images.txt").read_text().splitlines() == [
        "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
        "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest",
        "swebench/sweb.eval.x86_64.sympy_1776_sympy-20590:latest",
    ]
    rows = read_jsonl(out / "verified_eval.jsonl")
    assert [r["instance_id"] for r in rows] == IDS
    first = rows[0]
    assert first["image_name"] == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert first["FAIL_TO_PASS"] == ["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]
    for key in ("repo", "base_commit", "problem_statement", "patch", "test_patch", "PASS_TO_PASS",
                "version", "environment_setup_commit", "hints_text", "created_at", "workdir"):  # fmt: skip
        assert key in first, key
    assert load_instances(out / "verified_eval.jsonl").instances == load_instances(src).instances


def test_images_are_listed_once_in_first_use_order(tmp_path):
    shared = "swe-rl/shared-env:1"
    src = write_jsonl(
        tmp_path / "rows.jsonl",
        [
            swebench_row("a__a-1", image_name=shared),
            swebench_row("b__b-1"),
            swebench_row("c__c-1", image_name=shared),
        ],
    )
    proc, out = export(tmp_path, "--dataset", src)
    assert proc.returncode == 0, proc.stderr
    assert (out / "docker_images.txt").read_text().splitlines() == [
        shared,
        "swebench/sweb.eval.x86_64.b_1776_b-1:latest",
    ]
    assert len((out / "instance_ids.txt").read_text().splitlines()) == 3


def test_fixture_rows_keep_their_own_images(tmp_path):
    proc, out = export(tmp_path, "--dataset", FIXTURE_INSTANCES, "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    fixtures = load_instances(FIXTURE_INSTANCES, limit=2).instances
    assert (out / "docker_images.txt").read_text().splitlines() == [i.image for i in fixtures]
    assert [r["eval_script"] for r in read_jsonl(out / "verified_eval.jsonl")] == [
        i.eval_script for i in fixtures
    ]


def test_prefix_template_and_instance_ids(tmp_path):
    src = write_jsonl(tmp_path / "verified.jsonl", verified_rows())
    proc, out = export(tmp_path, "--dataset", src, "--image-prefix", "docker.io/swebench",
                       "--instance-ids", f"{IDS[2]},{IDS[0]},nope__nope-1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (out / "instance_ids.txt").read_text().splitlines() == [IDS[0], IDS[2]]
    assert (out / "docker_images.txt").read_text().splitlines() == [
        "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
        "docker.io/swebench/sweb.eval.x86_64.sympy_1776_sympy-20590:latest",
    ]
    assert "1 requested id(s) not found: nope__nope-1" in proc.stderr

    proc, out = export(
        tmp_path, "--dataset", src, "--image-template", "reg:5000/sweb.eval.x86_64.{id_swebench}:v1"
    )
    assert (out / "docker_images.txt").read_text().splitlines()[
        0
    ] == "reg:5000/sweb.eval.x86_64.django_1776_django-11099:v1"
    assert (
        read_jsonl(out / "verified_eval.jsonl")[0]["image_name"]
        == "reg:5000/sweb.eval.x86_64.django_1776_django-11099:v1"
    )


def test_nothing_exported_is_an_error(tmp_path):
    src = write_jsonl(tmp_path / "bad.jsonl", ['{"x', {"repo": "a/b"}])
    proc, out = export(tmp_path, "--dataset", src)
    assert proc.returncode == 1 and "no instance exported" in proc.stderr
    assert not out.exists()
    proc, _ = export(tmp_path, "--dataset", "princeton-nlp/SWE-bench_Verified")  # hub switched off
    assert proc.returncode == 1 and "cannot read 'princeton-nlp/SWE-bench_Verified'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_hub_dataset_name_is_the_data_source(tmp_path, monkeypatch, capsys):
    datasets = pytest.importorskip("datasets")
    rows = [r for r in verified_rows() if isinstance(r, dict) and r["problem_statement"]][:3]
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split: datasets.Dataset.from_list(rows))
    tool = load_tool(TOOL)
    assert tool.main(["--output-dir", str(tmp_path / "o")]) == 0  # default: SWE-bench Verified, test split
    capsys.readouterr()
    written = read_jsonl(tmp_path / "o" / "verified_eval.jsonl")
    assert {r["data_source"] for r in written} == {"princeton-nlp/SWE-bench_Verified"}
    assert [r["instance_id"] for r in written] == IDS
