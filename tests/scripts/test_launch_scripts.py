"""Training launch scripts: dry runs print the slime command we expect, and every
flag they pass is one the pinned slime defines (tests/data/slime_flags.txt)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # bash dry runs of every launch script: seconds

FLAGS = {
    line.strip()
    for line in (ROOT / "tests/data/slime_flags.txt").read_text().splitlines()
    if line.startswith("--")
}
TRAIN_SCRIPTS = {
    # script: (train nodes x 8 GPUs, actor nodes, rollout GPUs, TP, EP, model layers)
    "run_swe_rl_8b_remote_2nodes.sh": {"nodes": 2, "actor": 1, "rollout": 8, "tp": 2, "ep": 1, "layers": 36},
    "run_swe_rl_32b_remote_4nodes.sh": {
        "nodes": 4,
        "actor": 2,
        "rollout": 16,
        "tp": 8,
        "ep": 1,
        "layers": 64,
    },
    "run_swe_rl_32b_remote_8nodes.sh": {
        "nodes": 8,
        "actor": 4,
        "rollout": 32,
        "tp": 8,
        "ep": 1,
        "layers": 64,
    },
    "run_swe_rl_32b_remote_8nodes_resume.sh": {
        "nodes": 8,
        "actor": 4,
        "rollout": 32,
        "tp": 8,
        "ep": 1,
        "layers": 64,
    },
    "run_swe_rl_8b_prm_5nodes_remote.sh": {
        "nodes": 4,
        "actor": 2,
        "rollout": 16,
        "tp": 2,
        "ep": 1,
        "layers": 36,
    },
    "run_qwen3_30b_a3b_thinking_stage1_pivot.sh": {
        "nodes": 4,
        "actor": 2,
        "rollout": 16,
        "tp": 2,
        "ep": 8,
        "layers": 48,
    },
    "run_qwen3_30b_a3b_thinking_stage2_e2e.sh": {
        "nodes": 4,
        "actor": 2,
        "rollout": 16,
        "tp": 4,
        "ep": 8,
        "layers": 48,
    },
}
CODING_AGENT_SCRIPT = "run_coding_agent_qwen3_30b_a3b_fleet.sh"
TOKEN = "s3cret-token-value"


# the public config.json shapes of the scripts' models (test_model_args_match_the_public_configs)
MODEL_SHAPES = {
    "qwen3-8B": {"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32},
    "qwen3-32B": {"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64},
    "qwen3-30B-A3B": {
        "num_hidden_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_experts": 128,
        "moe_intermediate_size": 768,
        "num_experts_per_tok": 8,
    },
}


def hf_checkpoint(folder: Path, model: str) -> Path:
    """A checkpoint directory the dry run accepts for `model`: config.json of its shape, weights, tokenizer."""
    folder.mkdir(parents=True)
    config = {"rope_theta": 1000000, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}
    (folder / "config.json").write_text(json.dumps({**config, **MODEL_SHAPES[model]}))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def slime_rows(path: Path) -> Path:
    """Prompt rows as swe-preprocess writes them: {"text", "metadata": {"instance"}} (the fixture tasks)."""
    rows = [
        json.loads(line) for line in (ROOT / "data/fixtures/instances.jsonl").read_text().splitlines()[:2]
    ]
    path.write_text(
        "".join(
            json.dumps({"text": r["problem_statement"], "metadata": {"instance": r}}) + "\n" for r in rows
        )
    )
    return path


def installed_stubs(folder: Path) -> str:
    """Empty packages for what slime's train script imports and this machine lacks (SGLang): the dry run
    checks that they are found, which it may be here; `ray` and the rest are the real ones."""
    import importlib.util

    from swe_rl.slime.launch_check import HEAD_MODULES

    for name in HEAD_MODULES:
        if importlib.util.find_spec(name) is None:
            (folder / name).mkdir(parents=True)
            (folder / name / "__init__.py").write_text("")
    return str(folder)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return launch_env(tmp_path)


def launch_env(tmp_path: Path) -> dict[str, str]:
    """Dummy inputs: a fake slime and Megatron checkout, an HF checkpoint, a prompts file."""
    slime, megatron, ref = (tmp_path / n for n in ("slime", "Megatron-LM", "torch_dist"))
    for d in (slime, megatron / "megatron" / "core", ref):
        d.mkdir(parents=True)
    for model in MODEL_SHAPES:
        hf_checkpoint(tmp_path / "hf" / model, model)
    (slime / "train.py").write_text("")
    (slime / "train_async.py").write_text("")
    slime_rows(tmp_path / "train.jsonl")
    (tmp_path / "empty.env").write_text("")
    return {
        "PYTHONPATH": installed_stubs(tmp_path / "site"),
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        # never the checkout's .env.swe: a user's settings must not reach the tests
        # (test_a_users_env_file_in_the_checkout_never_reaches_the_tests)
        "SWE_ENV_FILE": str(tmp_path / "empty.env"),
        "SLIME_DIR": str(slime),
        "MEGATRON_DIR": str(megatron),
        "HF_CKPT": str(tmp_path / "hf" / "qwen3-8B"),  # dry_run() gives each script its model's
        "REF_LOAD": str(ref),
        "PROMPT_DATA": str(tmp_path / "train.jsonl"),
        "EXPORT_ROOT": str(tmp_path / "output"),
        "SWE_POOL_EXEC_URLS": "http://10.0.0.2:5000,http://10.0.0.3:5000",
        "SWE_EXEC_TOKEN": TOKEN,
        "MASTER_ADDR": "10.0.0.1",
        "RUN_TS": "20260101_000000",
        "PRM_MODEL_PATH": str(tmp_path / "hf" / "qwen3-32B"),
        "SWE_PRM_URL": "http://10.0.0.5:30010/v1",
    }


def dry_run(
    script: str, env: dict[str, str], *args: str, root: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """The script's --dry-run; the fixture's checkpoint becomes the one of the script's own model."""
    model = re.search(r"^MODEL_NAME=(\S+)", (root / "scripts" / script).read_text(), re.M)
    hf = Path(env.get("HF_CKPT", ""))
    if model and hf.parent.name == "hf" and hf.name in MODEL_SHAPES:
        env = {**env, "HF_CKPT": str(hf.parent / model.group(1))}
    return subprocess.run(
        ["bash", str(root / "scripts" / script), "--dry-run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def submitted(stdout: str) -> tuple[list[str], dict[str, str], str]:
    """The train script's arguments, the ray job's environment and the script path, from a dry run."""
    line = next(ln for ln in stdout.splitlines() if ln.startswith("+ ray job submit"))
    words = shlex.split(line[2:])
    env_file = words[words.index("--runtime-env") + 1]
    written = next(ln for ln in stdout.splitlines() if ln.startswith(f"+ write {env_file} (mode 600): "))
    runtime_env = json.loads(written.split(" (mode 600): ", 1)[1])["env_vars"]
    sep = words.index("--")
    assert words[sep + 1] == "python3"
    return words[sep + 3 :], runtime_env, words[sep + 2]


def section(stdout: str, role: str) -> str:
    """One role's part of a dry run's plan (the plan has every role of the cluster)."""
    parts = stdout.split("\n## role ")
    return next(part for part in parts[1:] if part.startswith(role + ":"))


def flag_values(args: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for word in args:
        if word.startswith("--"):
            current = word
            assert current not in out, f"{current} passed twice"
            out[current] = []
        else:
            assert current is not None, f"value {word!r} before any flag"
            out[current].append(word)
    return out


def test_flag_list_is_the_pinned_one():
    header = (ROOT / "tests/data/slime_flags.txt").read_text().splitlines()[1]
    pins = (ROOT / "third_party/pins.env").read_text()
    for name in ("SLIME_COMMIT", "MEGATRON_COMMIT"):
        commit = next(ln.split("=", 1)[1] for ln in pins.splitlines() if ln.startswith(name + "="))
        assert commit in header
    assert (
        len(FLAGS) > 1000
        and {"--custom-generate-function-path", "--num-layers", "--lr", "--sglang-mem-fraction-static"}
        <= FLAGS
    )


@pytest.mark.parametrize("script", list(TRAIN_SCRIPTS))
def test_dry_run_prints_the_slime_command(script, env):
    p = dry_run(script, env)
    assert p.returncode == 0, p.stderr
    args, runtime_env, train_py = submitted(p.stdout)
    unknown = sorted({a for a in args if a.startswith("--")} - FLAGS)
    assert not unknown, f"flags the pinned slime does not define: {unknown}"
    v = flag_values(args)
    want = TRAIN_SCRIPTS[script]
    stage1 = "stage1" in script
    assert train_py == f"{env['SLIME_DIR']}/train_async.py" and "--colocate" not in v
    assert v["--custom-generate-function-path"] == [
        "swe_rl.slime.pivot.generate" if stage1 else "swe_rl.slime.e2e.generate"
    ]
    assert v["--custom-rm-path"] == [
        "swe_rl.slime.reward.reward_func" if stage1 else "swe_rl.slime.reward.reward_func"
    ]
    assert v["--reward-key"] == ["score"]
    assert v["--custom-rollout-log-function-path"] == ["swe_rl.slime.metrics.log_rollout_data"]
    assert v["--custom-eval-rollout-log-function-path"] == ["swe_rl.slime.metrics.log_eval_rollout_data"]
    assert v["--custom-config-path"] == [str(ROOT / "configs/plugin_launch.yaml")]
    assert v["--custom-reward-post-process-path"] == ["swe_rl.slime.post_process.post_process_rewards"]
    assert (
        "--dynamic-sampling-filter-path" not in v and "--group-rm" not in v and "--partial-rollout" not in v
    )
    # one sample per context segment, each trajectory one token mean in the loss (docs/advantages.md)
    plugin = yaml.safe_load(Path(v["--custom-config-path"][0]).read_text())
    assert plugin["swe_samples"] == "segment" and "swe_dynamic_history" not in plugin
    assert "--calculate-per-token-loss" not in v
    assert v["--n-samples-per-prompt"] == ["8"]
    assert v["--actor-num-nodes"] == [str(want["actor"])] and v["--actor-num-gpus-per-node"] == ["8"]
    assert v["--rollout-num-gpus"] == [str(want["rollout"])]
    assert want["actor"] * 8 + want["rollout"] <= want["nodes"] * 8
    assert v["--tensor-model-parallel-size"] == [str(want["tp"])]
    assert v["--expert-model-parallel-size"] == [str(want["ep"])]
    assert v["--num-layers"] == [str(want["layers"])]
    assert v["--lr"] == ["1e-6"] and v["--eps-clip"] == ["0.2"] and v["--eps-clip-high"] == ["0.28"]
    assert "--use-kl-loss" not in v
    hf = v["--hf-checkpoint"]  # the fixture's checkpoint of the script's model (dry_run)
    assert Path(hf[0]).parent == Path(env["HF_CKPT"]).parent and v["--prompt-data"] == [env["PROMPT_DATA"]]
    assert v["--rotary-base"] == ["1000000"]  # read from the checkpoint's config.json
    if "30b_a3b" in script:
        assert v["--moe-aux-loss-coeff"] == ["0"] and v["--freeze-params-name-list"] == [r"mlp\.router\."]
        assert v["--num-experts"] == ["128"] and v["--moe-router-topk"] == ["8"]
        ctx, resp = ("32768", "8192") if stage1 else ("65536", "8192")
    else:
        assert "--freeze-params-name-list" not in v
        ctx, resp = "16384", "4096"
    assert v["--rollout-max-context-len"] == [ctx] and v["--rollout-max-response-len"] == [resp]
    # outputs: timestamped folders under EXPORT_ROOT; a fixed one for the resume script
    run = script.removeprefix("run_").removesuffix(".sh").replace("_", "-")
    out = Path(env["EXPORT_ROOT"])
    if script.endswith("_resume.sh"):
        assert v["--save"] == v["--load"] == [str(out / "ckpt/swe-rl-32b-remote-8nodes_fixed")]
        assert v["--ref-load"] == [env["REF_LOAD"]]
    else:
        assert v["--save"] == [str(out / f"ckpt/{run}_20260101_000000")] and "--load" not in v
        assert v["--ref-load"] == hf
    traj = runtime_env["SWE_SAVE_TRAJ_DIR"]
    assert traj.startswith(str(out / "swe_rollouts")) and traj.endswith("_20260101_000000")
    # the rollout manager reaches the pool on the head; slime, Megatron and swe_rl are importable
    assert runtime_env["SWE_POOL_URL"] == "http://10.0.0.1:18090"
    # the rollout workers hold a client token of their own: never the exec servers' token
    assert "SWE_EXEC_TOKEN" not in runtime_env and "SWE_EXEC_TOKEN_FILE" not in runtime_env
    assert runtime_env["SWE_POOL_TOKEN"] and runtime_env["SWE_POOL_TOKEN"] != TOKEN
    assert runtime_env["PYTHONPATH"].split(":") == [str(ROOT), env["SLIME_DIR"], env["MEGATRON_DIR"]]
    assert runtime_env["SWE_MAX_CONCURRENT"] == "128"
    if "prm" in script:
        assert runtime_env["SWE_PRM_ENABLE"] == "1" and runtime_env["SWE_PRM_URL"] == env["SWE_PRM_URL"]
        assert "+ wait for http://10.0.0.5:30010/v1/models" in p.stdout
    # the head's other steps, in order; secrets never printed
    head = section(p.stdout, "head")
    assert "<- this node" in head.splitlines()[0] and "problem" not in p.stdout
    steps = [ln.split()[1] + " " + ln.split()[2] for ln in head.splitlines() if ln.startswith("+ ")]
    assert (
        steps.index("curl -fsS")
        < steps.index("env SWE_POOL_HOST=10.0.0.1")
        < steps.index("ray start")
        < steps.index("ray job")
    )
    assert "--num-gpus 8" in head and f"wait until ray has {want['nodes'] * 8} GPUs" in head
    assert TOKEN not in p.stdout + p.stderr


@pytest.mark.parametrize("script", list(TRAIN_SCRIPTS))
def test_worker_joins_the_head(script, env):
    p = dry_run(script, {**env, "NODE_RANK": "1"})
    assert p.returncode == 0, p.stderr
    worker = section(p.stdout, "worker")
    assert "<- this node" in worker.splitlines()[0] and "<- this node" not in section(p.stdout, "head")
    assert "# role: worker" in worker
    assert "+ ray start --address 10.0.0.1:6379 --num-gpus 8 --disable-usage-stats --block" in worker
    assert "ray job submit" not in worker and "pool_server" not in worker


def test_prm_node_serves_the_judge(env):
    p = dry_run("run_swe_rl_8b_prm_5nodes_remote.sh", {**env, "NODE_RANK": "4"})
    assert p.returncode == 0, p.stderr
    prm = section(p.stdout, "prm")
    assert "# role: prm" in prm and "ray " not in prm and "<- this node" in prm.splitlines()[0]
    line = next(ln for ln in prm.splitlines() if "sglang.launch_server" in ln)
    assert (
        f"--model-path {env['PRM_MODEL_PATH']}" in line and "--port 30010" in line and "--dp-size 8" in line
    )


@pytest.mark.parametrize(
    "missing, message",
    [
        ("HF_CKPT", "set HF_CKPT"),
        ("PROMPT_DATA", "set PROMPT_DATA"),
        ("SLIME_DIR", "set SLIME_DIR"),
        ("MEGATRON_DIR", "set MEGATRON_DIR"),
        ("SWE_POOL_EXEC_URLS", "set SWE_POOL_EXEC_URLS"),
        ("SWE_EXEC_TOKEN", "set SWE_EXEC_TOKEN or SWE_EXEC_TOKEN_FILE"),
    ],
)
def test_missing_input_is_a_clear_error(env, missing, message):
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", {k: v for k, v in env.items() if k != missing})
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr
    # the plan is printed all the same, the missing item marked where it is used
    assert (
        "+ ray job submit" in p.stdout
        and f"# <- problem: {missing.replace('TOKEN', 'TOKEN_FILE')}" in p.stdout
    )


def test_a_real_launch_runs_the_same_checks_and_nothing_else(env, tmp_path):
    """Without DRY_RUN the same report stops the launch before anything runs (no ray, no pool)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ray", "curl", "python3"):  # would leave a trace if the launch went on
        # python3 also runs the launch's checks (python3 -m swe_rl.slime.launch_check): those are let through
        real = (
            f'case "$*" in *launch_check*) exec {shutil.which(tool)} "$@";; esac\n'
            if tool == "python3"
            else ""
        )
        (bin_dir / tool).write_text(f"#!/bin/sh\n{real}echo ran >> {tmp_path}/ran\n")
        (bin_dir / tool).chmod(0o755)
    bad = {**env, "PATH": f"{bin_dir}:{env['PATH']}", "SLIME_DIR": str(tmp_path / "nope")}
    del bad["HF_CKPT"]
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/run_swe_rl_8b_remote_2nodes.sh")],
        env=bad,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2, p.stderr
    assert "2 problem(s)" in p.stderr and "SLIME_DIR=" in p.stderr and "set HF_CKPT" in p.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "output").exists()


def test_dry_run_reports_every_problem_at_once_with_its_origin_and_fix(env, tmp_path):
    """One run lists every missing or wrong item (where its value came from, how to fix it), then the plan."""
    token_file = tmp_path / "token"
    hf_without_config = tmp_path / "hf-empty"
    hf_without_config.mkdir()
    env_file = tmp_path / "user.env"
    env_file.write_text(f"SLIME_DIR=/nonexistent/slime\nHF_CKPT={hf_without_config}\n")
    keep = ("PATH", "HOME", "EXPORT_ROOT", "RUN_TS", "PYTHONPATH")
    bare = {k: v for k, v in env.items() if k in keep}
    p = dry_run(
        "run_swe_rl_8b_remote_2nodes.sh",
        {
            **bare,
            "SWE_ENV_FILE": str(env_file),
            "SWE_EXEC_TOKEN_FILE": str(token_file),
            "SWE_POOL_EXEC_URLS": "node1",
        },
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    err = p.stderr
    assert "9 problem(s)" in err
    assert f"SLIME_DIR=/nonexistent/slime [from .env.swe ({env_file})] is not a directory" in err
    assert "third_party/slime.md" in err  # how to fix it
    assert "set MEGATRON_DIR" in err and "set PROMPT_DATA" in err and "swe-preprocess" in err
    assert f"HF_CKPT={hf_without_config} [from .env.swe ({env_file})] has no config.json" in err
    assert f"SWE_EXEC_TOKEN_FILE={token_file} [from environment] is not a readable, non-empty file" in err
    assert "'node1' is not an exec server URL" in err
    # what only the cluster would have found: a loopback head for two nodes, a checkpoint without weights
    assert "MASTER_ADDR=127.0.0.1 [from default] is a loopback address but the plan has 2 nodes" in err
    assert f"HF_CKPT={hf_without_config} [from .env.swe ({env_file})] has no weights" in err
    assert f"HF_CKPT={hf_without_config} [from .env.swe ({env_file})] has no tokenizer" in err
    # the full plan, every role, the problems marked where they are
    head, worker = section(p.stdout, "head"), section(p.stdout, "worker")
    assert "+ ray job submit" in head and "--prompt-data MISSING_PROMPT_DATA" in head
    assert "# env: PROMPT_DATA is not set" in head and "# env: MEGATRON_DIR is not set" in head
    submit = next(ln for ln in head.splitlines() if ln.startswith("+ ray job submit"))
    assert {"SLIME_DIR", "PROMPT_DATA"} <= set(submit.split("# <- problem:")[1].split())
    env_line = next(
        ln for ln in head.splitlines() if ln.startswith("+ write ") and "ray_runtime_env.json" in ln
    )
    assert {"SLIME_DIR", "MEGATRON_DIR"} <= set(env_line.split("# <- problem:")[1].split())  # in PYTHONPATH
    assert "+ ray start --address" in worker


def test_command_line_wins_over_env_file_which_wins_over_defaults(env, tmp_path):
    env_file = tmp_path / "user.env"
    env_file.write_text("SLIME_DIR=/from/the/file\nROLLOUT_BATCH_SIZE=4\nLR=3e-6\nexport TP=1\n")
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", {**env, "SWE_ENV_FILE": str(env_file), "TP": "2"})
    assert p.returncode == 0, p.stderr
    v = flag_values(submitted(p.stdout)[0])
    assert v["--rollout-batch-size"] == ["4"] and v["--lr"] == ["3e-6"]  # the file over the defaults
    assert v["--tensor-model-parallel-size"] == ["2"]  # the environment over the file
    assert submitted(p.stdout)[2] == f"{env['SLIME_DIR']}/train_async.py"
    head = section(p.stdout, "head")
    assert f"# env: SLIME_DIR={env['SLIME_DIR']}   [environment]" in head
    assert "# env: RUN_NAME=swe-rl-8b-remote-2nodes   [default]" in head
    assert f"# settings file: {env_file}" in p.stdout
    p = dry_run(
        "run_swe_rl_8b_remote_2nodes.sh",
        {**{k: v for k, v in env.items() if k != "PROMPT_DATA"}, "SWE_ENV_FILE": str(env_file)},
    )
    assert p.returncode == 2 and "set PROMPT_DATA" in p.stderr


def test_a_users_env_file_in_the_checkout_never_reaches_the_tests(env, tmp_path):
    """A filled .env.swe in the checkout (what the README's first step makes) changes no test's plan.

    Run in a copy of the scripts with a populated .env.swe at its root: with the tests' environment the
    plan is the checkout's own; without SWE_ENV_FILE the copy's file is read (so the guard is real).
    """
    copy = tmp_path / "checkout"
    for part in ("scripts", "configs", "third_party", "server"):
        shutil.copytree(ROOT / part, copy / part)
    (copy / ".env.swe").write_text(
        "SLIME_DIR=/opt/slime\nMEGATRON_DIR=/opt/Megatron-LM\nHF_CKPT=/data/models/Qwen3-8B\n"
        "PROMPT_DATA=/data/train.jsonl\nROLLOUT_BATCH_SIZE=99\nSWE_POOL_EXEC_URLS=http://172.16.0.10:5000\n"
    )
    for script in TRAIN_SCRIPTS:
        p = dry_run(script, env, root=copy)
        assert p.returncode == 0, (script, p.stderr)
        v = flag_values(submitted(p.stdout)[0])
        assert "99" not in v["--rollout-batch-size"] and v["--hf-checkpoint"][0].startswith(
            env["HF_CKPT"][:-8]
        )
        assert "172.16.0.10" not in p.stdout
    p = dry_run(
        "run_swe_rl_8b_remote_2nodes.sh", {k: v for k, v in env.items() if k != "SWE_ENV_FILE"}, root=copy
    )
    assert flag_values(submitted(p.stdout)[0])["--rollout-batch-size"] == ["99"]


def test_old_pool_variable_names_are_refused_naming_the_new_ones(env):
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", {**env, "SWE_MAX_CONTAINERS_PER_NODE": "9"})
    assert (
        p.returncode == 2 and "SWE_MAX_CONTAINERS_PER_NODE was renamed: set SWE_POOL_MAX_PER_NODE" in p.stderr
    )
    assert "Traceback" not in p.stderr


def test_bad_inputs_are_clear_errors(env, tmp_path):
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", {**env, "PROMPT_DATA": str(tmp_path / "nope.jsonl")})
    assert p.returncode == 2 and "PROMPT_DATA=" in p.stderr and "is not a file" in p.stderr
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", {**env, "SLIME_DIR": env["MEGATRON_DIR"]})
    assert p.returncode == 2 and "is it a slime checkout?" in p.stderr
    p = dry_run("run_swe_rl_32b_remote_8nodes_resume.sh", {**env, "REF_LOAD": str(tmp_path / "none")})
    assert p.returncode == 2 and "REF_LOAD=" in p.stderr and "torch_dist" in p.stderr
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", {**env, "ROLLOUT_GPUS": "16"})
    assert p.returncode == 2 and "exceed the ray cluster" in p.stderr
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", env, "--bogus")
    assert p.returncode == 2 and "unknown argument: --bogus" in p.stderr
    p = dry_run("run_swe_rl_8b_prm_5nodes_remote.sh", {k: v for k, v in env.items() if k != "SWE_PRM_URL"})
    assert p.returncode == 2 and "set SWE_PRM_URL" in p.stderr


def test_env_file_is_sourced_and_dry_run_env_var_works(env, tmp_path):
    env_file = tmp_path / "env.swe"
    env_file.write_text(f"PROMPT_DATA={env['PROMPT_DATA']}\nROLLOUT_BATCH_SIZE=4\n")
    env = {k: v for k, v in env.items() if k != "PROMPT_DATA"}
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/run_swe_rl_8b_remote_2nodes.sh")],
        env={**env, "SWE_ENV_FILE": str(env_file), "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert flag_values(submitted(p.stdout)[0])["--rollout-batch-size"] == ["4"]


def test_overrides_reach_the_command(env):
    p = dry_run(
        "run_swe_rl_8b_remote_2nodes.sh",
        {
            **env,
            "KL_COEF": "0.001",
            "WANDB_PROJECT": "swe",
            "EVAL_PROMPT_DATA": env["PROMPT_DATA"],
            "EXTRA_TRAIN_ARGS": "--use-tis --keep-old-actor",
            "DYNAMIC_SAMPLING_FILTER_PATH": "swe_rl.slime.filters.check_trajectory_reward_nonzero_std",
        },
    )
    assert p.returncode == 0, p.stderr
    args, _, _ = submitted(p.stdout)
    assert not sorted({a for a in args if a.startswith("--")} - FLAGS)
    v = flag_values(args)
    assert v["--kl-loss-coef"] == ["0.001"] and "--use-kl-loss" in v and "--use-tis" in v
    assert v["--dynamic-sampling-filter-path"] == ["swe_rl.slime.filters.check_trajectory_reward_nonzero_std"]
    assert v["--wandb-project"] == ["swe"] and v["--eval-prompt-data"] == ["swe", env["PROMPT_DATA"]]


def test_sglang_cluster_dry_run(env, tmp_path):
    base = {
        "PATH": env["PATH"],
        "HOME": env["HOME"],
        "SWE_ENV_FILE": "/dev/null",
        "MODEL_PATH": env["HF_CKPT"],
        "SGLANG_NODE_ADDRS": "10.0.0.1,10.0.0.2",
        "TP": "2",
        "LOG_DIR": str(tmp_path / "logs"),
    }
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/launch_sglang_cluster.sh"), "--dry-run"],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    server = next(ln for ln in p.stdout.splitlines() if "sglang.launch_server" in ln)
    assert "--tp-size 2 --dp-size 4" in server and "chat_template_qwen3_thinking.jinja" in server
    router = next(ln for ln in p.stdout.splitlines() if "sglang_router.launch_router" in ln)
    assert "--worker-urls http://10.0.0.1:30000 http://10.0.0.2:30000" in router
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/launch_sglang_cluster.sh"), "--dry-run"],
        env={**base, "NODE_RANK": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0 and "launch_router" not in p.stdout and "launch_server" in p.stdout
    p = subprocess.run(
        ["bash", str(ROOT / "scripts/launch_sglang_cluster.sh"), "--dry-run"],
        env={k: v for k, v in base.items() if k != "SGLANG_NODE_ADDRS"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2 and "set SGLANG_NODE_ADDRS" in p.stderr


def test_model_args_match_the_public_configs():
    """Our model files against the Qwen3 config.json values (layers, hidden, heads, kv heads, ffn, vocab)."""
    expected = {
        "qwen3-8B": (36, 4096, 32, 8, 12288),
        "qwen3-32B": (64, 5120, 64, 8, 25600),
        "qwen3-30B-A3B": (48, 2048, 32, 4, 6144),
    }
    for name, (layers, hidden, heads, kv, ffn) in expected.items():
        out = subprocess.run(
            ["bash", "-c", f'source "{ROOT}/scripts/models/{name}.sh"; printf "%s\\n" "${{MODEL_ARGS[@]}}"'],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        v = flag_values(out)
        assert not set(v) - FLAGS
        assert v["--num-layers"] == [str(layers)] and v["--hidden-size"] == [str(hidden)]
        assert v["--num-attention-heads"] == [str(heads)] and v["--num-query-groups"] == [str(kv)]
        assert v["--ffn-hidden-size"] == [str(ffn)] and v["--vocab-size"] == ["151936"]
        assert v["--kv-channels"] == ["128"] and v["--norm-epsilon"] == ["1e-6"]


@pytest.fixture
def agent_env(env, tmp_path):
    """The coding-agent variant's extra inputs: upstream's example in SLIME_DIR, the Node and CLI tarballs."""
    example = Path(env["SLIME_DIR"]) / "examples/coding_agent_rl"
    example.mkdir(parents=True)
    (example / "generate.py").write_text("")
    for name in ("node.tar", "cc.tgz", "codex.tgz"):
        (tmp_path / name).write_bytes(b"")
    return {
        **env,
        "SLIME_AGENT_NODE_TARBALL": str(tmp_path / "node.tar"),
        "SLIME_AGENT_CC_TARBALL": str(tmp_path / "cc.tgz"),
    }


def test_coding_agent_variant_runs_upstreams_example_on_the_fleet(agent_env):
    p = dry_run(CODING_AGENT_SCRIPT, agent_env)
    assert p.returncode == 0, p.stderr
    args, runtime_env, train_py = submitted(p.stdout)
    assert not sorted({a for a in args if a.startswith("--")} - FLAGS)
    v = flag_values(args)
    assert v["--custom-generate-function-path"] == ["swe_rl.slime.agent_generate.generate"]
    assert "--custom-rm-path" not in v and "--reward-key" not in v  # the example rewards its samples itself
    assert (
        v["--input-key"] == ["prompt"]
        and v["--label-key"] == ["label"]
        and v["--metadata-key"] == ["metadata"]
    )
    assert v["--sglang-tool-call-parser"] == ["qwen3_coder"] and v["--sglang-reasoning-parser"] == ["qwen3"]
    assert (
        v["--num-experts"] == ["128"]
        and v["--actor-num-nodes"] == ["2"]
        and v["--rollout-num-gpus"] == ["16"]
    )
    assert train_py == f"{agent_env['SLIME_DIR']}/train_async.py"
    # the rollout process finds the pool, upstream's example (on PYTHONPATH via SLIME_DIR) and its settings
    assert runtime_env["SWE_POOL_URL"] == "http://10.0.0.1:18090"
    assert agent_env["SLIME_DIR"] in runtime_env["PYTHONPATH"].split(":")
    assert runtime_env["SWE_AGENT"] == "claude_code" and runtime_env["ADAPTER_PUBLIC_HOST"] == "10.0.0.1"
    assert runtime_env["ADAPTER_PORT"] == "18001"
    assert runtime_env["SLIME_AGENT_NODE_TARBALL"] == agent_env["SLIME_AGENT_NODE_TARBALL"]
    assert runtime_env["SLIME_AGENT_CC_TARBALL"] == agent_env["SLIME_AGENT_CC_TARBALL"]
    assert runtime_env["SWE_FLEET_SANDBOX_NETWORK"] == "true"
    assert runtime_env["SWE_FLEET_SANDBOX_EVAL_NETWORK"] == "false"
    assert TOKEN not in p.stdout + p.stderr

    p = dry_run(
        CODING_AGENT_SCRIPT,
        {
            **agent_env,
            "SWE_AGENT": "codex",
            "SWE_FLEET_SANDBOX_NETWORK": "adapter-net",
            "SLIME_AGENT_CODEX_TARBALL": agent_env["SLIME_AGENT_CC_TARBALL"],
            "EXTRA_TRAIN_ARGS": "--use-tis",
        },
    )
    assert p.returncode == 0, p.stderr
    args, runtime_env, _ = submitted(p.stdout)
    assert runtime_env["SWE_AGENT"] == "codex" and runtime_env["SWE_FLEET_SANDBOX_NETWORK"] == "adapter-net"
    assert "--use-tis" in args and "--sglang-tool-call-parser" in args


def test_plugin_scripts_still_pass_their_rm(env):
    v = flag_values(submitted(dry_run("run_swe_rl_8b_remote_2nodes.sh", env).stdout)[0])
    assert v["--custom-rm-path"] == ["swe_rl.slime.reward.reward_func"] and v["--reward-key"] == ["score"]
    assert "--label-key" not in v


@pytest.mark.parametrize(
    "change, message",
    [
        ({"SLIME_AGENT_NODE_TARBALL": None}, "set SLIME_AGENT_NODE_TARBALL"),
        ({"SLIME_AGENT_CC_TARBALL": None}, "set SLIME_AGENT_CC_TARBALL"),
        ({"SWE_AGENT": "codex"}, "set SLIME_AGENT_CODEX_TARBALL"),
        ({"SWE_AGENT": "aider"}, "SWE_AGENT must be claude_code or codex"),
        ({"ADAPTER_PUBLIC_HOST": "127.0.0.1"}, "cannot reach a loopback address"),
        ({"SLIME_AGENT_NODE_TARBALL": "/nonexistent/node.tar"}, "is not a file"),
    ],
)
def test_coding_agent_variant_refuses_missing_inputs(agent_env, change, message):
    env = {k: v for k, v in {**agent_env, **change}.items() if v is not None}
    p = dry_run(CODING_AGENT_SCRIPT, env)
    assert (
        p.returncode == 2 and message in p.stderr and "+ ray job submit" in p.stdout
    )  # plan printed all the same


def test_coding_agent_variant_needs_upstreams_example(env, tmp_path):
    p = dry_run(
        CODING_AGENT_SCRIPT,
        {
            **env,
            "SLIME_AGENT_NODE_TARBALL": str(tmp_path / "x"),
            "SLIME_AGENT_CC_TARBALL": str(tmp_path / "x"),
        },
    )
    assert p.returncode == 2 and "examples/coding_agent_rl" in p.stderr


def test_the_readme_shows_the_plugin_flags_the_scripts_pass(env):
    """README's "The scripts give upstream slime ... the plugin:" block is what a dry run submits."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("The scripts give upstream slime", 1)[1].split("```", 2)[1]
    shown = flag_values(shlex.split(block))
    p = dry_run("run_swe_rl_8b_remote_2nodes.sh", env)
    passed = flag_values(submitted(p.stdout)[0])
    for flag, values in shown.items():
        assert flag in passed, flag
        got = [v.removeprefix(str(ROOT) + "/") for v in passed[flag]]
        assert got == values, (flag, values, passed[flag])
