"""Plugin settings: defaults < SWE_* environment < swe_* keys on args (the --custom-config-path YAML)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from swe_rl.slime.config import PluginConfig, unknown_settings


def test_defaults():
    c = PluginConfig.from_sources(None, env={})
    assert (c.step_limit, c.max_concurrent, c.samples, c.context_head_ratio, c.reward_unresolved) == (
        50,
        128,
        "segment",
        0.3,
        -1.0,
    )
    assert c.context_low_water == 0.3 and c.allow_step_advantages is False and c.multi_sample


@pytest.mark.parametrize(
    "keys, samples",
    [
        ({}, "segment"),
        ({"swe_dynamic_history": True}, "turn"),  # the old names keep what they meant
        ({"swe_dynamic_history": False}, "last"),
        ({"swe_dynamic_history": False, "swe_samples": "segment"}, "segment"),  # the new name wins
        ({"swe_samples": "turn"}, "turn"),
    ],
)
def test_samples_setting_and_its_deprecated_name(keys, samples):
    c = PluginConfig.from_args(SimpleNamespace(**keys), env={})
    assert c.samples == samples and c.multi_sample == (samples != "last")


@pytest.mark.parametrize("value", [0.0, 1.5, -0.1])
def test_low_water_is_a_share_of_the_budget(value):
    with pytest.raises(ValueError, match="context_low_water"):
        PluginConfig.from_args(SimpleNamespace(swe_context_low_water=value), env={})


def test_env_then_args_override(tmp_path):
    # what slime does with --custom-config-path: every YAML key becomes an attribute of args
    path = tmp_path / "swe.yaml"
    path.write_text("swe_step_limit: 30\nswe_dynamic_history: false\nswe_container_options: {memory: 4g}\n")
    args = SimpleNamespace(
        rollout_max_context_len=32768, hf_checkpoint="/models/qwen3", **yaml.safe_load(path.read_text())
    )
    env = {
        "SWE_MAX_CONCURRENT": "64",
        "SWE_SAVE_TRAJ_DIR": "/out/rollouts",
        "SWE_STEP_LIMIT": "40",
        "SWE_CONTEXT_MANAGEMENT": "false",
    }
    c = PluginConfig.from_args(args, env=env)
    assert c.step_limit == 30  # the YAML wins over the environment
    assert c.max_concurrent == 64 and c.save_traj_dir == "/out/rollouts" and c.context_management is False
    assert c.samples == "last" and c.container_options == {"memory": "4g"}
    assert c.max_context_len == 32768 and c.tokenizer_path == "/models/qwen3"  # from slime's own args


def test_plugin_keys_win_over_slime_fallbacks():
    args = SimpleNamespace(rollout_max_context_len=32768, swe_max_context_len=16384)
    assert PluginConfig.from_args(args, env={}).max_context_len == 16384


def test_bad_values_are_clear_errors():
    with pytest.raises(ValueError, match="step_limit"):
        PluginConfig.from_sources(None, env={"SWE_STEP_LIMIT": "many"})


@pytest.mark.parametrize(
    "key, value",
    [
        ("swe_retry_infra_failures", -1),
        ("swe_checkpoint_every", 0),
        ("swe_branch_at_step", -2),
        ("swe_branch_at_step", "soon"),
    ],
)
def test_fork_settings_are_checked(key, value):
    with pytest.raises(ValueError, match=key.removeprefix("swe_")):
        PluginConfig.from_args(SimpleNamespace(**{key: value}), env={})


def test_fork_settings_are_known_keys():
    c = PluginConfig.from_args(
        SimpleNamespace(swe_retry_infra_failures=2, swe_checkpoint_every=3, swe_branch_at_step=4), env={}
    )
    assert (c.retry_infra_failures, c.checkpoint_every, c.branch_at_step) == (2, 3, 4)
    assert not unknown_settings(PluginConfig, SimpleNamespace(swe_branch_at_step=1), {})
    assert unknown_settings(PluginConfig, SimpleNamespace(swe_branch_at_stp=1), {}) == [
        ("swe_branch_at_stp", "swe_branch_at_step")
    ]


def test_router_url():
    assert (
        PluginConfig.router_url(SimpleNamespace(sglang_router_ip="10.0.0.1", sglang_router_port=30000))
        == "http://10.0.0.1:30000/generate"
    )
    with pytest.raises(ValueError, match="sglang_router_ip"):
        PluginConfig.router_url(SimpleNamespace())


def test_shipped_yaml_documents_every_key_with_its_default(tmp_path, monkeypatch):
    # The shipped file names its prompt template by a relative path; from another checkout's folder it would
    # name that checkout's copy (two checkouts sharing one Python: two CI runs side by side).
    monkeypatch.chdir(tmp_path)
    from swe_rl.configs import config_text

    data = yaml.safe_load(config_text("plugin_swe.yaml"))
    assert {k for k in data if k.startswith("swe_")} == {f"swe_{name}" for name in PluginConfig.model_fields}
    # the one slime key: the trajectory reward post-process (docs/advantages.md)
    assert {k for k in data if not k.startswith("swe_")} == {"custom_reward_post_process_path"}
    assert data["custom_reward_post_process_path"] == "swe_rl.slime.post_process.post_process_rewards"
    assert PluginConfig.from_args(SimpleNamespace(**data), env={}) == PluginConfig()


def test_misspelt_keys_and_variables_warn_with_the_nearest_valid_name(caplog):
    from swe_rl.slime import config as plugin_config

    plugin_config._warned.clear()
    plugin_config._checked.clear()
    args = SimpleNamespace(swe_step_limt=30, swe_prm_step_coeff=0.5, swe_step_limit=20, rollout_batch_size=8)
    env = {
        "SWE_MAX_CONCURENT": "4",
        "SWE_PRM_ENABEL": "1",
        "SWE_POOL_URL": "http://x",
        "SWE_EXEC_TOKEN": "t",
        "SWE_CLIENT_BACKOFF": "0.1",
        "SWE_SAVE_TRAJ_DIR": "/tmp/x",
        "SWE_PIVOT_PARTIAL_CREDIT": "0.5",
    }
    config = PluginConfig.from_args(args, env=env)
    assert config.step_limit == 20  # the valid key still applies
    found = dict(plugin_config.unknown_settings(PluginConfig, args, env))
    assert found == {
        "swe_step_limt": "swe_step_limit",
        "swe_prm_step_coeff": "swe_prm_step_coef",
        "SWE_MAX_CONCURENT": "SWE_MAX_CONCURRENT",
        "SWE_PRM_ENABEL": "SWE_PRM_ENABLE",
    }
    assert "did you mean swe_step_limit?" in caplog.text and "did you mean SWE_MAX_CONCURRENT?" in caplog.text
    caplog.clear()
    PluginConfig.from_args(args, env=env)  # once per process, not once per rollout
    assert "did you mean" not in caplog.text


def test_every_documented_key_is_known():
    from swe_rl.configs import config_text
    from swe_rl.slime.config import unknown_settings

    data = yaml.safe_load(config_text("plugin_swe.yaml"))
    flat = {f"swe_prm_{k}": v for k, v in data["swe_prm"].items()}
    assert unknown_settings(PluginConfig, SimpleNamespace(**data, **flat), {}) == []


def test_the_deprecated_name_is_warned_once(caplog):
    from swe_rl.slime import config as plugin_config

    plugin_config._warned.discard("swe_dynamic_history")
    with caplog.at_level("WARNING"):
        for _ in range(2):
            PluginConfig.from_args(SimpleNamespace(swe_dynamic_history=False), env={})
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["swe_dynamic_history is deprecated"]


async def test_the_clean_store_reaches_the_rollout_processs_grader(monkeypatch, tmp_path):
    """``swe_clean_store`` (or ``SWE_CLEAN_STORE``) is the store the grading of every rollout reads."""
    from swe_rl.slime import runtime

    monkeypatch.setenv("SWE_POOL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SWE_POOL_TOKEN", "t")
    store = str(tmp_path / "clean-trees")
    for config in (
        PluginConfig.from_args(SimpleNamespace(swe_clean_store=store), env={}),
        PluginConfig.from_args(SimpleNamespace(), env={"SWE_CLEAN_STORE": store}),
    ):
        state = runtime.ProcessState(config)
        try:
            session = state.fleet(config)
            assert session.grader.config.clean_store == store
            await session.close()
        finally:
            await state.http.aclose()
