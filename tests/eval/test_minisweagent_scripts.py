"""The mini-swe-agent and SWE-bench Verified scripts: dry runs (nothing is started)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import ROOT

PIN = re.search(r'"mini-swe-agent==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)


def bash(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SWE_", "SGLANG", "EVAL_", "VERIFIED"))}
    return subprocess.run(
        ["bash", str(ROOT / script), *args],
        env={**clean, "SWE_ENV_FILE": "/dev/null", **env},  # never the checkout's .env.swe
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_run_dry_run_passes_slicing_and_model_on(tmp_path):
    p = bash(
        "scripts/run_minisweagent_eval.sh",
        "--sglang-url",
        "http://10.0.0.1:30000/",
        "--workers",
        "16",
        "--slice",
        "0:250",
        "--subset",
        "verified",
        "--model",
        "Qwen3-32B",
        "--dry-run",
        "--grade",
        "--",
        "-c",
        "agent.step_limit=50",
        MSWEA_VENV=str(tmp_path / "venv"),
    )
    assert p.returncode == 0, p.stderr
    run_line, grade_line = p.stdout.strip().splitlines()
    assert run_line.startswith(
        f"+ {tmp_path}/venv/bin/python {ROOT}/eval/run_minisweagent.py --subset verified "
    )
    for part in (
        "--model openai/Qwen3-32B",
        "--api-base http://10.0.0.1:30000/v1",
        "--workers 16",
        "--slice 0:250",
        "-c agent.step_limit=50",
        f"--output {ROOT}/output/minisweagent_runs/Qwen3-32B_verified_0-250",
    ):
        assert part in run_line
    assert "eval/grade_predictions.py --preds" in grade_line and "--local-fleet" in grade_line
    assert grade_line.startswith(
        f"+ {tmp_path}/venv/bin/python "
    )  # one interpreter for the run and the grading


def test_run_dry_run_uses_verified_assets_and_shards(tmp_path):
    p = bash(
        "scripts/run_minisweagent_eval.sh",
        "--sglang-url",
        "http://r:30000/v1",
        "--workers",
        "2",
        "--shard",
        "1/4",
        "--dry-run",
        VERIFIED_DIR=str(tmp_path),
    )
    assert p.returncode == 0, p.stderr
    assert f"--data {tmp_path}/verified_eval.jsonl" in p.stdout and "--shard 1/4" in p.stdout
    assert "_shard1of4" in p.stdout and "--grade" not in p.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "--sglang-url is required"),
        (("--sglang-url", "http://r", "--workers", "0"), "--workers must be a positive integer"),
        (("--sglang-url", "http://r", "--slice", "five"), "--slice must look like a:b"),
        (("--sglang-url", "http://r", "--shard", "1-4"), "--shard must look like I/N"),
        (("--sglang-url", "http://r", "--bogus"), "unknown argument"),
    ],
)
def test_run_rejects_bad_arguments(args, message):
    p = bash("scripts/run_minisweagent_eval.sh", *args, "--dry-run")
    assert p.returncode == 2 and message in p.stderr


def test_setup_dry_run_lists_every_step(tmp_path):
    venv = tmp_path / "venv"
    p = bash(
        "scripts/setup_minisweagent_node.sh",
        "--dry-run",
        "--venv",
        str(venv),
        "--sglang-url",
        "http://r:30000",
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert f"mini-swe-agent {PIN}" in out and "+ docker info" in out
    assert f"-m venv {venv}" in out and f"-e {ROOT}[minisweagent]" in out
    assert f"{venv}/mswea-config/.env" in out and "+ curl http://r:30000/v1/models" in out


def test_verified_local_dry_run(tmp_path):
    out_dir = tmp_path / "run"
    p = bash(
        "scripts/eval_swe_verified_local.sh",
        "--dry-run",
        "--verified-dir",
        str(tmp_path / "v"),
        "--sglang-url",
        "http://r:30000",
        "--output",
        str(out_dir),
        SERVED_MODEL_NAME="Qwen3-32B",
        SWE_POOL_URL="http://127.0.0.1:18090",
        MAX_INSTANCES="5",
        INSTANCE_IDS="a__b-1,a__b-2",
    )
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip().splitlines()[-1]
    assert line.startswith("+ ") and "eval/eval_swe.py" in line
    for part in (
        f"--data {tmp_path}/v/verified_eval.jsonl",
        f"--output-dir {out_dir}",
        "--model openai/Qwen3-32B",
        "--api-base http://r:30000/v1",
        "--max-instances 5",
        "--instance-ids a__b-1,a__b-2",
    ):
        assert part in line

    p = bash(
        "scripts/eval_swe_verified_local.sh",
        "--dry-run",
        "--verified-dir",
        str(tmp_path / "v"),
        "--model-path",
        "/models/Qwen3-8B",
        "--output",
        str(out_dir),
        SWE_POOL_EXEC_URLS="http://n1:5000",
        SWE_EXEC_TOKEN="t",
    )
    assert p.returncode == 0, p.stderr
    assert "sglang.launch_server --model-path /models/Qwen3-8B --served-model-name Qwen3-8B" in p.stdout
    assert "pool_server.py" in p.stdout and "--model openai/Qwen3-8B" in p.stdout


def test_verified_local_needs_its_assets(tmp_path):
    p = bash("scripts/eval_swe_verified_local.sh", SGLANG_URL="http://r:30000", SWE_POOL_URL="http://p")
    assert p.returncode == 2 and "set VERIFIED_DIR" in p.stderr
    p = bash(
        "scripts/eval_swe_verified_local.sh",
        VERIFIED_DIR=str(tmp_path),
        SGLANG_URL="http://r:30000",
        SWE_POOL_URL="http://p",
    )
    assert p.returncode == 2 and "verified_eval.jsonl missing" in p.stderr


def test_pin_is_the_same_everywhere():
    notes = (ROOT / "third_party/minisweagent.md").read_text()
    assert f"mini-swe-agent=={PIN}" in notes
    assert "mini-swe-agent" in (ROOT / "third_party/README.md").read_text()
