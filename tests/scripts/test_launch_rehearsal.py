"""The head's real launch, rehearsed on this machine as a user runs it (docs/training.md: the rehearsal).

A filled ``.env.swe`` (through SWE_ENV_FILE), then ``NODE_RANK=0 bash scripts/run_swe_rl_8b_remote_2nodes.sh``
for real: a real Ray head (PyPI's ``ray``) on loopback with its GPUs declared (``--num-gpus``: Ray takes
a count without devices), the pool server the launch starts from the file's token, two exec servers of a
local fleet as the Docker nodes, and ``ray job submit`` of the train script with the launch's full
argument list and runtime environment. The one-node layout (TRAIN_NODES=1, 16 declared GPUs) keeps it to
one Ray node.

The job is `rehearsal_entry.py` put into SLIME_DIR as the train script. Two levels, the test says which:
- ``slime``: slime's source at the pin (SLIME_DIR or SWE_SLIME_GIT) and Megatron-LM's at slime's pin
  (MEGATRON_DIR or SWE_MEGATRON_GIT): the job runs slime's own ``parse_args`` (Megatron's argument parser
  and validation, slime's, the HF config check) on the full list; only SGLang's argument classes, wandb and
  Megatron's one GPU query are stubbed (rehearsal_entry.py says how).
- ``stand-in`` (CI: slime is not reachable): the job proves what it can without slime: it received the
  full argument list (the dry run's, word for word) and the user's environment, and reaches the pool with
  the token it was given.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from swe_rl.fleet.local import LocalFleet, free_port
from swe_rl.testing.qwen_tokenizer import build_qwen_tokenizer
from tests.conftest import ROOT
from tests.upstream_slime import pinned_source, slime_source

pytestmark = [pytest.mark.docker, pytest.mark.slow]

QWEN3_8B = {  # Qwen3-8B's public config.json (the shape scripts/models/qwen3-8B.sh gives)
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}


def megatron_source() -> Path | None:
    """A folder holding Megatron-LM's ``megatron/`` at slime's pin (MEGATRON_DIR or SWE_MEGATRON_GIT), or None."""
    return pinned_source(
        "MEGATRON_DIR", "SWE_MEGATRON_GIT", "MEGATRON_COMMIT", "megatron", "megatron/training"
    )


def slime_rows(path: Path) -> Path:
    rows = [json.loads(ln) for ln in (ROOT / "data/fixtures/instances.jsonl").read_text().splitlines()[:2]]
    path.write_text(
        "".join(
            json.dumps({"text": r["problem_statement"], "metadata": {"instance": r}}) + "\n" for r in rows
        )
    )
    return path


def stub_packages(folder: Path) -> str:
    """Empty SGLang packages, so that the launch's check finds them (the job stubs their classes itself)."""
    for name in ("sglang", "sglang_router"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text("")
    return str(folder)


@pytest.fixture
def rehearsal(tmp_path: Path):
    """The inputs of a filled .env.swe; Ray's session files in a short temp dir (socket paths are short)."""
    slime, megatron = slime_source(), megatron_source()
    level = "slime" if slime and megatron else "stand-in"
    slime_dir, hf = tmp_path / "slime", tmp_path / "Qwen3-8B"
    slime_dir.mkdir()
    if level == "slime":
        assert slime is not None and megatron is not None
        (slime_dir / "slime").symlink_to(slime / "slime")
        megatron_dir = megatron
    else:
        megatron_dir = tmp_path / "Megatron-LM"
        (megatron_dir / "megatron" / "core").mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("rehearsal_entry.py"), slime_dir / "swe_rehearsal_entry.py")
    shutil.copytree(build_qwen_tokenizer(), hf)
    (hf / "config.json").write_text(json.dumps(QWEN3_8B))
    (hf / "model.safetensors").write_bytes(
        b""
    )  # the launch checks that weights are there; nothing loads them
    ray_tmp = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))
    try:
        yield {"level": level, "slime": slime_dir, "megatron": megatron_dir, "hf": hf, "ray_tmp": ray_tmp}
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_head_launches_for_real_from_a_filled_env_file(rehearsal, tmp_path):
    out = tmp_path / "job.json"
    with LocalFleet(exec_servers=2) as fleet:
        env_file = tmp_path / ".env.swe"
        settings = {  # what a user writes into .env.swe: none of it is in the launch's environment
            "SLIME_DIR": rehearsal["slime"],
            "MEGATRON_DIR": rehearsal["megatron"],
            "HF_CKPT": rehearsal["hf"],
            "PROMPT_DATA": slime_rows(tmp_path / "train.jsonl"),
            "SWE_POOL_EXEC_URLS": ",".join(fleet.exec_urls),
            "SWE_EXEC_TOKEN": fleet.exec_token,
            "WANDB_API_KEY": "rehearsal-wandb-key",
            "SWE_PRM_URL": "http://127.0.0.1:9/v1",
            "SWE_REHEARSAL_OUT": out,
            "SWE_REHEARSAL_SLIME": "1" if rehearsal["level"] == "slime" else "0",
            "TRAIN_SCRIPT": "swe_rehearsal_entry.py",
        }
        env_file.write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in settings.items()))
        ray_port, dashboard = free_port(), free_port()
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "SWE_ENV_FILE": str(env_file),
            "PYTHONPATH": stub_packages(tmp_path / "site"),
            "NODE_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "TRAIN_NODES": "1",  # one Ray node declaring 16 GPUs: 8 for the actor, 8 for the engines
            "GPUS_PER_NODE": "16",
            "ACTOR_GPUS_PER_NODE": "8",
            "RAY_PORT": str(ray_port),
            "RAY_DASHBOARD_PORT": str(dashboard),
            "RAY_HEAD_ARGS": f"--temp-dir {rehearsal['ray_tmp']} --ray-client-server-port {free_port()} "
            f"--dashboard-agent-listen-port {free_port()} --include-dashboard true",
            "RAY_TMPDIR": str(rehearsal["ray_tmp"]),
            "TMPDIR": str(rehearsal["ray_tmp"]),  # Ray's processes leave temp dirs (pymp-*) when stopped
            "POOL_PORT": str(free_port()),
            "EXPORT_ROOT": str(tmp_path / "output"),
            "RUN_TS": "20260101_000000",
            "RAY_JOIN_TIMEOUT": "600",
            "POOL_START_TIMEOUT": "300",
        }
        script = str(ROOT / "scripts/run_swe_rl_8b_remote_2nodes.sh")
        plan = subprocess.run(
            ["bash", script, "--dry-run"], env=env, capture_output=True, text=True, timeout=300
        )
        assert plan.returncode == 0, plan.stderr
        submit = shlex.split(
            next(ln for ln in plan.stdout.splitlines() if ln.startswith("+ ray job submit"))[2:]
        )
        planned = submit[submit.index("--") + 3 :]
        proc = subprocess.Popen(
            ["bash", script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            log, _ = proc.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the launch's exit trap stops the pool and ray
            log, _ = proc.communicate(timeout=120)
        finally:
            subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, log[-6000:]
    job = json.loads(out.read_text())
    print(f"rehearsal level: {rehearsal['level']}")
    # the full argument list and the user's environment (set only in .env.swe) reached the job
    assert job["argv"] == planned and "--custom-generate-function-path" in job["argv"]
    assert job["env"]["WANDB_API_KEY"] == "rehearsal-wandb-key"
    # given in a file only its owner reads, not on ray's command line
    env_json = tmp_path / "output/logs/swe-rl-8b-remote-2nodes_20260101_000000/ray_runtime_env.json"
    assert env_json.stat().st_mode & 0o077 == 0 and "--runtime-env-json" not in log
    assert job["env"]["SWE_PRM_URL"] == "http://127.0.0.1:9/v1"
    assert job["env"]["SWE_POOL_URL"] == f"http://127.0.0.1:{env['POOL_PORT']}"
    # the pool the head started (with the file's token) answers the job with that token, refuses another,
    # and has the fleet's two exec servers as its nodes
    pool = job["pool"]
    assert pool["status"] == 200 and pool["wrong_token_status"] == 401
    assert sorted(n["url"] for n in pool["body"]["nodes"]) == sorted(fleet.exec_urls)
    if rehearsal["level"] == "slime":  # slime's own parse and validation of the whole list
        parsed = job["slime"]["parsed"]
        assert parsed["num_layers"] == 36 and parsed["hidden_size"] == 4096
        assert parsed["custom_generate_function_path"] == "swe_rl.slime.e2e.generate"
        assert parsed["hf_checkpoint"] == str(rehearsal["hf"]) and job["slime"]["sglang_tp_size"] == 2
    else:
        assert "slime" not in job
