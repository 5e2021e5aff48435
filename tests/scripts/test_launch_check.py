"""The launch's Python checks (swe_rl.slime.launch_check), on their own: fast, no bash, no cluster.

The dry run calls them on slime's full argument list; tests/scripts/test_launch_checks.py runs them
through the scripts. Here each refusal is the plugin's own (`check_options`), read from the flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rl.slime import launch_check
from swe_rl.slime.runtime import POST_PROCESS_PATH
from tests.conftest import ROOT

BASE = [
    "--custom-generate-function-path",
    "swe_rl.slime.e2e.generate",
    "--custom-config-path",
    str(ROOT / "configs/plugin_launch.yaml"),
    "--custom-reward-post-process-path",
    POST_PROCESS_PATH,
    "--advantage-estimator",
    "grpo",
    "--num-layers",
    "36",
    "--hidden-size",
    "4096",
    "--num-attention-heads",
    "32",
]


def refused(argv: list[str]) -> list[str]:
    return [m for name, m in launch_check.problems(argv) if name == "TRAIN_ARGS"]


def test_flags_are_read_the_way_slime_names_them():
    flags = launch_check.parse_flags(
        [
            "--use-opsm",
            "--disable-rewards-normalization",
            "--eval-prompt-data",
            "swe",
            "/d.jsonl",
            "--lr",
            "1e-6",
        ]
    )
    assert flags["use_opsm"] is True and flags["rewards_normalization"] is False
    assert flags["eval_prompt_data"] == ["swe", "/d.jsonl"] and flags["lr"] == "1e-6"


def test_the_launchs_own_arguments_pass():
    assert refused(BASE) == []


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--advantage-estimator", "gspo"], "--advantage-estimator gspo"),
        (["--use-opsm"], "--use-opsm"),
        (["--custom-reward-post-process-path", "my.module.post_process"], "which is not the project's"),
        (["--group-rm"], "--group-rm is not supported"),
        (["--partial-rollout"], "--partial-rollout is not supported"),
    ],
)
def test_what_the_plugin_refuses_is_refused_before_the_cluster(extra, says):
    """The same ValueError the plugin raises at its first rollout (after engines and Megatron are up)."""
    messages = refused(BASE + extra)
    assert len(messages) == 1 and says in messages[0] and "the plugin refuses" in messages[0]


def test_another_generate_function_is_not_the_plugins_to_check():
    argv = [a if a != "swe_rl.slime.e2e.generate" else "examples.other.generate" for a in BASE]
    assert refused([*argv, "--use-opsm"]) == []


def instance_row() -> dict:
    return json.loads((ROOT / "data/fixtures/instances.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize(
    "row, says",
    [
        ("raw", "a raw SWE row"),
        ("not json", "is not JSON"),
        ("no text", "has no 'text'"),
        ("bad instance", "instance_id"),
    ],
)
def test_prompt_rows_must_be_slime_jsonl_with_an_instance(tmp_path, row, says):
    inst = instance_row()
    lines = {
        "raw": json.dumps(inst),
        "not json": "{oops",
        "no text": json.dumps({"metadata": {"instance": inst}}),
        "bad instance": json.dumps({"text": "x", "metadata": {"instance": {"repo": "a/b"}}}),
    }
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"text": "ok", "metadata": {"instance": inst}}) + "\n" + lines[row] + "\n")
    found = launch_check.check_rows("PROMPT_DATA", str(path), "text", "metadata")
    assert (
        len(found) == 1 and found[0][0] == "PROMPT_DATA" and says in found[0][1] and "line 2" in found[0][1]
    )
    path.write_text(json.dumps({"text": "ok", "metadata": json.dumps({"instance": inst})}) + "\n")
    assert launch_check.check_rows("PROMPT_DATA", str(path), "text", "metadata") == []


def checkpoint(folder: Path, config: dict, *, complete: bool = True) -> str:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if complete:
        (folder / "model-00001-of-00002.safetensors").write_bytes(b"")
        (folder / "tokenizer_config.json").write_text("{}")
    return str(folder)


def test_a_checkpoint_needs_weights_a_tokenizer_and_the_scripts_shape(tmp_path):
    flags = launch_check.parse_flags(BASE)
    eight_b = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32}
    assert launch_check.check_checkpoint(checkpoint(tmp_path / "ok", eight_b), flags) == []
    only_config = launch_check.check_checkpoint(checkpoint(tmp_path / "bare", eight_b, complete=False), flags)
    assert [m.split(" has ")[1][:14] for _, m in only_config] == ["no weights (*.", "no tokenizer ("]
    thirty_two_b = {"hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64}
    (wrong,) = launch_check.check_checkpoint(checkpoint(tmp_path / "32b", thirty_two_b), flags)
    assert "num_hidden_layers=64 but --num-layers 36" in wrong[1] and "hidden_size=5120" in wrong[1]
    moe = {**eight_b, "num_experts": 128}
    (wrong,) = launch_check.check_checkpoint(checkpoint(tmp_path / "moe", moe), flags)
    assert "num_experts=128 but --num-experts (not set)" in wrong[1]


def test_a_package_slimes_train_script_needs_is_named(monkeypatch):
    monkeypatch.setattr(launch_check, "HEAD_MODULES", {"json": "-", "no_such_package_xyz": "pip install it"})
    assert launch_check.check_modules() == [
        (
            "PYTHON",
            f"the head's Python ({launch_check.sys.executable}) cannot import no_such_package_xyz: pip install it",
        )
    ]


def test_the_entry_point_prints_one_line_per_problem(capsys):
    assert launch_check.main(["--", *BASE, "--use-opsm"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("TRAIN_ARGS\t")]
    assert len(lines) == 1 and "--use-opsm" in lines[0]


def test_a_binary_prompt_file_is_a_problem_not_a_crash(tmp_path):
    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1\xff\xfe\x00")
    ((name, message),) = launch_check.check_rows("PROMPT_DATA", str(path), "text", "metadata")
    assert name == "PROMPT_DATA" and "not a readable UTF-8 text file" in message
