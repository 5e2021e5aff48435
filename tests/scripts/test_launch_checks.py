"""The launch's checks through the scripts: what the dry run refuses (one report, each item's origin), what
.env.swe hands to the processes a launch starts, a service that dies, and the other scripts' reports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.fleet.local import free_port
from tests.conftest import ROOT
from tests.scripts.test_launch_scripts import dry_run, launch_env, submitted

pytestmark = pytest.mark.slow  # bash dry runs: seconds each
SCRIPT = "run_swe_rl_8b_remote_2nodes.sh"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The launch scripts' tests' inputs (test_launch_scripts.launch_env)."""
    return launch_env(tmp_path)


def test_env_file_values_are_exported_to_child_processes(tmp_path):
    env_file = tmp_path / "user.env"
    env_file.write_text("SWE_FROM_FILE=file-value\nWANDB_API_KEY=k3y\nSHADOWED=file\n")
    out = subprocess.run(
        [
            "bash",
            "-c",
            f"source {ROOT}/scripts/lib/env_file.sh; swe_env_file_load /nonexistent; "
            "bash -c 'echo \"$SWE_FROM_FILE $WANDB_API_KEY $SHADOWED\"'",
        ],
        env={"PATH": os.environ["PATH"], "SWE_ENV_FILE": str(env_file), "SHADOWED": "environment"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["file-value", "k3y", "environment"]  # exported; the environment still wins


def test_the_ray_job_gets_the_users_variables(env, tmp_path):
    env_file = tmp_path / "user.env"
    env_file.write_text("WANDB_API_KEY=k3y\nMY_TOOL_HOME=/opt/tool\nSWE_PRM_URL=http://10.0.0.5:30010/v1\n")
    base = {k: v for k, v in env.items() if k != "SWE_PRM_URL"}
    p = dry_run(SCRIPT, {**base, "SWE_ENV_FILE": str(env_file), "SWE_AGENT_MAX_TURNS": "7"})
    assert p.returncode == 0, p.stderr
    job_env = submitted(p.stdout)[1]
    # what .env.swe set (a secret masked in the printed plan; the rehearsal shows the job gets the value)
    assert job_env["WANDB_API_KEY"] == "***" and job_env["MY_TOOL_HOME"] == "/opt/tool"
    assert job_env["SWE_PRM_URL"] == "http://10.0.0.5:30010/v1" and job_env["SWE_AGENT_MAX_TURNS"] == "7"
    assert job_env["PYTHONPATH"].split(":")[0] == str(ROOT)  # the launch's, not the user's


@pytest.mark.parametrize(
    "setting, value, says",
    [
        ("EXTRA_TRAIN_ARGS", "--advantage-estimator gspo", "--advantage-estimator gspo"),
        ("EXTRA_TRAIN_ARGS", "--use-opsm", "--use-opsm"),
        ("REWARD_POST_PROCESS_PATH", "my_pkg.rewards.post_process", "which is not the project's"),
    ],
)
def test_what_the_plugin_refuses_stops_the_dry_run(env, tmp_path, setting, value, says):
    env_file = tmp_path / "user.env"
    env_file.write_text(f"{setting}='{value}'\n")
    p = dry_run(SCRIPT, {**env, "SWE_ENV_FILE": str(env_file)})
    assert p.returncode == 2 and "1 problem(s)" in p.stderr, p.stderr
    assert "the plugin refuses slime's arguments" in p.stderr and says in p.stderr
    assert f"{setting}={value} [from .env.swe ({env_file})]" in p.stderr  # where it came from


def test_inputs_only_the_cluster_would_have_refused(env, tmp_path):
    empty_megatron = tmp_path / "empty-megatron"
    empty_megatron.mkdir()
    raw = tmp_path / "raw.jsonl"
    raw.write_text((ROOT / "data/fixtures/instances.jsonl").read_text().splitlines()[0] + "\n")
    shutil.copy(env["PROMPT_DATA"], tmp_path / "rel.jsonl")
    p = dry_run(SCRIPT, {**env, "MEGATRON_DIR": str(empty_megatron), "PROMPT_DATA": str(raw)})
    assert p.returncode == 2 and "2 problem(s)" in p.stderr
    assert f"MEGATRON_DIR={empty_megatron} [from environment] is not a Megatron-LM checkout" in p.stderr
    assert (
        f"PROMPT_DATA={raw} [from environment] line 1 has no 'metadata.instance' (a raw SWE row" in p.stderr
    )
    p = subprocess.run(
        ["bash", str(ROOT / "scripts" / SCRIPT), "--dry-run"],
        env={**env, "PROMPT_DATA": "rel.jsonl", "HF_CKPT": str(Path(env["HF_CKPT"]).parent / "qwen3-32B")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 2 and "2 problem(s)" in p.stderr
    assert "PROMPT_DATA=rel.jsonl [from environment] is a relative path" in p.stderr
    assert (
        "is not the shape of qwen3-8B" in p.stderr and "num_hidden_layers=64 but --num-layers 36" in p.stderr
    )


def test_ray_missing_is_in_the_report(env, tmp_path):
    assert not Path("/usr/bin/ray").exists() and not Path("/bin/ray").exists()
    p = dry_run(SCRIPT, {**env, "PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert p.returncode == 2 and "ray is not on PATH" in p.stderr and "pip install 'ray[default]'" in p.stderr


def test_a_pool_server_that_dies_is_reported_with_its_log(env, tmp_path):
    """The pool's token comes from .env.swe only (exported); the pool then dies of its lease database path:
    the launch says so at once, with the exit status and the end of pool_server.log (not a wait to time-out)."""
    site = tmp_path / "exec"
    site.mkdir()
    (site / "healthz").write_text("ok")  # an "exec server" answering /healthz
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        (tmp_path / "a-file").write_text("")
        env_file = tmp_path / "user.env"
        env_file.write_text("SWE_EXEC_TOKEN=only-in-the-file\n")
        launch = {k: v for k, v in env.items() if k != "SWE_EXEC_TOKEN"}
        launch.update(
            SWE_ENV_FILE=str(env_file),
            SWE_POOL_EXEC_URLS=f"http://127.0.0.1:{port}",
            SWE_POOL_DB=str(tmp_path / "a-file" / "leases.db"),
            POOL_PORT=str(free_port()),
            POOL_START_TIMEOUT="3000",
            MASTER_ADDR="127.0.0.1",
            TRAIN_NODES="1",
            GPUS_PER_NODE="16",
            ACTOR_GPUS_PER_NODE="8",
        )
        p = subprocess.run(
            ["bash", str(ROOT / "scripts" / SCRIPT)],
            env=launch,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        server.terminate()
        server.wait(30)
    assert p.returncode == 2, p.stderr
    assert "error: the pool server exited (status 1) before it answered" in p.stderr
    assert "pool_server.log" in p.stderr and "FileExistsError" in p.stderr  # its reason, from its log
    assert "no exec token" not in p.stderr and "curl:" not in p.stderr
    assert "ray start" not in p.stderr  # nothing after the pool


def test_sglang_cluster_reports_every_problem_with_its_origin(tmp_path):
    env_file = tmp_path / "user.env"
    env_file.write_text("TP=3\n")
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/launch_sglang_cluster.sh"), "--dry-run"],
        env={
            "PATH": os.environ["PATH"],
            "SWE_ENV_FILE": str(env_file),
            "SGLANG_NODE_ADDRS": "127.0.0.1,10.0.0.2",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2 and "3 problem(s)" in p.stderr
    assert (
        "set MODEL_PATH" in p.stderr and "SGLANG_NODE_ADDRS=127.0.0.1,10.0.0.2 [from environment]" in p.stderr
    )
    assert (
        f"GPUS_PER_NODE=8 [from default] is not a multiple of TP=3 [from .env.swe ({env_file})]" in p.stderr
    )


def test_the_main_job_dry_run_starts_nothing(tmp_path):
    out = tmp_path / "run"
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/run_local_eval.sh"), "--max-concurrent", "4"],
        env={"PATH": os.environ["PATH"], "DRY_RUN": "1", "OUTPUT_DIR": str(out), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert "+ bash scripts/setup_machine.sh" in p.stdout and "eval/eval_swe.py" in p.stdout
    assert "--local-fleet" in p.stdout and "--max-concurrent 4" in p.stdout
    assert not out.exists() and "[setup]" not in p.stdout + p.stderr


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in (ROOT / "scripts").glob("run_*.sh")) + ["launch_sglang_cluster.sh"],
)
def test_help_starts_with_the_usage_line(script):
    p = subprocess.run(
        ["bash", str(ROOT / "scripts" / script), "--help"],
        env={"PATH": os.environ["PATH"], "SWE_ENV_FILE": "/dev/null", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0 and p.stdout.startswith("usage:"), (script, p.stdout[:200], p.stderr[-300:])
    assert "shellcheck" not in p.stdout and f"scripts/{script}" in p.stdout.splitlines()[0]
