"""Reward integrity in the slime plugin: integrity fields in metadata, swe_drop_flagged, swe_flagged_reward
(a scripted SGLang router, the real tokenizer, real containers of the fixture images)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from agent_fixtures import leftover_containers
from test_e2e import FIX, SAMPLING, SUBMIT, new_sample, traj_dir, turn

from swe_rl.slime.config import PluginConfig
from swe_rl.slime.e2e import generate
from swe_rl.slime.reward import reward_for, reward_func
from swe_rl.testing.fake_sglang import FakeSGLang

HACK = "printf 'def pytest_runtest_makereport(item, call):\\n    pass\\n' > conftest.py"


async def test_a_fix_with_a_conftest_is_resolved_on_the_fix_and_flagged(
    plugin_env, qwen_tokenizer, pool, tmp_path, docker_client
):
    script = [
        turn("History?", "git log --all --oneline"),
        turn("Fix.", FIX),
        turn("Hook.", HACK),
        turn("Done.", SUBMIT),
    ]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, dynamic_history=False, flagged_reward=-0.5)
        sample = await generate(args, new_sample(), dict(SAMPLING))
    info = sample.metadata["swe"]
    assert info["status"] == "resolved" and info["official_status"] == "resolved"
    assert info["official_source"] == "full_patch_run" and info["tampered"]
    assert info["tamper_rules"] == ["conftest"] and info["flags"]["history_probe"] == 1
    assert info["git_hygiene"]["refs_removed"] == 0 and not sample.remove_sample
    assert (await reward_func(args, sample))["score"] == -0.5
    traj = json.loads((traj_dir(tmp_path) / "traj.json").read_text())
    assert traj["grade"]["tamper"]["records"][0]["path"] == "conftest.py"
    assert traj["steps"][0]["flags"] == ["history_probe"]
    assert not leftover_containers(docker_client, pool)


async def test_drop_flagged_removes_the_rollout(plugin_env, qwen_tokenizer, pool):
    script = [turn("Tags?", "git tag -l"), turn("Fix.", FIX), turn("Done.", SUBMIT)]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        args = plugin_env(sglang, dynamic_history=True, drop_flagged=True)
        samples = await generate(args, new_sample(), dict(SAMPLING))
    (sample,) = samples
    assert sample.remove_sample and sample.metadata["swe"]["removed_reason"].startswith("flagged:")
    assert sample.metadata["swe"]["resolved"]  # the outcome is kept for the record, never trained on
    assert (await reward_func(args, samples)) == [reward_for(sample, PluginConfig.from_args(args))]
    assert (await reward_func(args, samples))[0]["removed"]


def test_flagged_reward_and_clean_rollouts():
    config = PluginConfig(flagged_reward=0.0)
    clean = SimpleNamespace(
        metadata={"swe": {"resolved": True, "flags": {}, "tampered": False}}, remove_sample=False
    )
    flagged = SimpleNamespace(
        metadata={"swe": {"resolved": True, "flags": {"test_edit": 1}}}, remove_sample=False
    )
    tampered = SimpleNamespace(metadata={"swe": {"resolved": False, "tampered": True}}, remove_sample=False)
    assert reward_for(clean, config)["score"] == 1.0
    assert reward_for(flagged, config)["score"] == 0.0 and reward_for(tampered, config)["score"] == 0.0
    assert reward_for(flagged, PluginConfig())["score"] == 1.0
