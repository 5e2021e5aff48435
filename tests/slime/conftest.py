"""Fixtures of the slime-layer tests: `plugin_env` (slime-like args for the plugin over a real pool)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from swe_rl.slime import e2e
from swe_rl.testing.fake_sglang import FakeSGLang


@pytest.fixture
async def plugin_env(pool, fixture_instances, qwen_tokenizer_dir, tmp_path, monkeypatch):
    """slime-like args for the plugin, the fleet in the environment, artifacts under tmp_path."""
    monkeypatch.setenv("SWE_POOL_URL", pool.url)
    monkeypatch.setenv("SWE_POOL_TOKEN", pool.token)
    monkeypatch.setenv("SWE_CLIENT_BACKOFF", "0.1")
    monkeypatch.setenv("SWE_SAVE_TRAJ_DIR", str(tmp_path / "rollouts"))
    monkeypatch.setenv("SWE_MAX_CONCURRENT", "2")

    def make_args(sglang: FakeSGLang, **swe) -> SimpleNamespace:
        return SimpleNamespace(
            sglang_router_ip="127.0.0.1",
            sglang_router_port=sglang.port,
            hf_checkpoint=str(qwen_tokenizer_dir),
            rollout_max_context_len=swe.pop("context", None),
            reward_key="score",
            **{f"swe_{k}": v for k, v in swe.items()},
        )

    yield make_args
    await e2e.shutdown()
