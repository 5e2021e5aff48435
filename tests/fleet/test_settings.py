"""swe_rl.fleet.settings: one reader of environment variables for every config (no server, no network)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from swe_rl.fleet.catalogue import fleet_env_vars
from swe_rl.fleet.client import EnvClientConfig
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.pool.config import ENV as POOL_ENV
from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.sandbox import FleetSandboxConfig
from swe_rl.fleet.settings import (
    EnvVar,
    parse_value,
    prefixed,
    read_env,
    renamed_vars,
)
from swe_rl.slime.config import PluginConfig, unknown_settings

RENAMED = {
    "SWE_EXEC_SERVER_URLS": "SWE_POOL_EXEC_URLS",
    "SWE_LEASE_TTL": "SWE_POOL_LEASE_TTL",
    "SWE_MAX_CONTAINERS_PER_NODE": "SWE_POOL_MAX_PER_NODE",
    "SWE_HEALTH_INTERVAL": "SWE_POOL_HEALTH_INTERVAL",
    "SWE_NODE_DOWN_AFTER": "SWE_POOL_NODE_DOWN_AFTER",
}


def test_an_empty_environment_gives_the_defaults():
    assert ExecConfig.from_env({}) == ExecConfig()
    assert PoolConfig.from_env({}) == PoolConfig()
    assert EnvClientConfig.from_env({}) == EnvClientConfig()
    assert FleetSandboxConfig.from_env({}) == FleetSandboxConfig()
    assert PluginConfig.from_sources(None, {}) == PluginConfig()


def test_values_are_parsed_by_the_field_type():
    cfg = ExecConfig.from_env(
        {
            "SWE_EXEC_PORT": "5001",
            "SWE_EXEC_CPUS": "1.5",
            "SWE_EXEC_ALLOW_PULL": "1",
            "SWE_EXEC_ALLOW_NETWORK": "false",
            "SWE_EXEC_NETWORKS": " a, b ,,",
            "SWE_EXEC_MEMORY": "8g",
            "SWE_EXEC_HOST": "",
        }
    )
    assert (cfg.port, cfg.cpus, cfg.allow_pull, cfg.allow_network) == (5001, 1.5, True, False)
    assert cfg.networks == ("a", "b") and cfg.memory == "8g"
    assert cfg.host == "127.0.0.1"  # empty counts as unset
    pool = PoolConfig.from_env(
        {
            "SWE_POOL_EXEC_URLS": "http://a:5000/, http://b:5000",
            "SWE_POOL_KEEP_LEASES_ON_EXIT": "1",
            "SWE_POOL_ID": "p1",
            "SWE_POOL_DB": "/tmp/x.db",
        }
    )
    assert pool.exec_urls == ["http://a:5000", "http://b:5000"] and pool.keep_leases_on_exit
    assert (pool.pool_id, pool.db_path) == ("p1", "/tmp/x.db")
    client = EnvClientConfig.from_env(
        {"SWE_CLIENT_RETRIES": "7", "SWE_POOL_URL": "http://pool:1"}, backoff=0.1
    )
    assert (client.retries, client.pool_url, client.backoff) == (7, "http://pool:1", 0.1)
    sandbox = FleetSandboxConfig.from_env(
        {"SWE_FLEET_SANDBOX_NETWORK": "adapter-net", "SWE_FLEET_SANDBOX_CPUS": " 3 "}
    )
    assert (sandbox.network, sandbox.cpus) == ("adapter-net", 3.0)
    plugin = PluginConfig.from_sources(
        None,
        {
            "SWE_HARNESS_MIX": '{"bash_block": 1}',
            "SWE_ENABLE_THINKING": "no",
            "SWE_PRM_ENABLE": "1",
            "SWE_PRM_URL": "http://judge/v1",
        },
    )
    assert plugin.harness_mix == {"bash_block": 1} and plugin.enable_thinking is False and plugin.prm.enable


def test_a_bad_value_names_the_variable():
    with pytest.raises(ValueError, match="SWE_EXEC_PORT='many'"):
        ExecConfig.from_env({"SWE_EXEC_PORT": "many"})
    with pytest.raises(ValueError, match="SWE_EXEC_ALLOW_PULL"):
        ExecConfig.from_env({"SWE_EXEC_ALLOW_PULL": "maybe"})


def test_tokens_come_from_the_variable_or_its_file(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert ExecConfig.from_env({"SWE_EXEC_TOKEN_FILE": str(token_file)}).token == "from-file"
    assert (
        ExecConfig.from_env({"SWE_EXEC_TOKEN": " direct ", "SWE_EXEC_TOKEN_FILE": str(token_file)}).token
        == "direct"
    )
    pool = PoolConfig.from_env({"SWE_EXEC_TOKEN": "e", "SWE_POOL_TOKEN_FILE": str(token_file)})
    assert (pool.exec_token, pool.pool_token) == ("e", "from-file")
    assert EnvClientConfig.from_env({"SWE_POOL_TOKEN_FILE": str(token_file)}).token == "from-file"


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_an_old_pool_name_is_an_error_naming_the_new_one(old, new):
    value = "http://n1:5000" if "URLS" in old else "3"
    with pytest.raises(ValueError, match=f"{old} was renamed: set {new} instead"):
        PoolConfig.from_env({old: value})
    with pytest.raises(ValueError, match=f"{old} was renamed"):  # even beside the new name: never silent
        PoolConfig.from_env({old: value, new: value})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no warning
        PoolConfig.from_env({new: value})


def test_every_pool_variable_has_the_pool_prefix_but_the_shared_exec_token():
    for field, var in POOL_ENV.items():
        assert var.name.startswith("SWE_POOL_") or field == "exec_token", (field, var.name)
    assert renamed_vars(POOL_ENV) == RENAMED


def test_one_prefix_per_object():
    prefixes = {
        "exec server": ("SWE_EXEC_",),
        "pool server": ("SWE_POOL_", "SWE_EXEC_TOKEN"),
        "client": ("SWE_CLIENT_", "SWE_POOL_URL", "SWE_POOL_TOKEN"),
        "sandbox": ("SWE_FLEET_SANDBOX_",),
        "slime agent generate": ("SWE_FLEET_SANDBOX_",),
    }
    for owner, spec in fleet_env_vars().items():
        for var in spec.values():
            assert var.name.startswith(prefixes[owner]), (owner, var.name)


def test_the_plugin_check_leaves_every_fleet_variable_alone():
    env = {name: "1" for spec in fleet_env_vars().values() for var in spec.values() for name in var.names}
    assert unknown_settings(PluginConfig, None, env) == []
    assert dict(unknown_settings(PluginConfig, None, {"SWE_MAX_CONCURENT": "4"})) == {
        "SWE_MAX_CONCURENT": "SWE_MAX_CONCURRENT"
    }


def test_helpers():
    spec = prefixed("SWE_X_", ["a", "b", "c"], b=EnvVar("SWE_B", old=("SWE_OLD_B",)), c=None)
    assert spec == {"a": EnvVar("SWE_X_A"), "b": EnvVar("SWE_B", old=("SWE_OLD_B",))}
    assert read_env(spec, {"a": int}, {"SWE_X_A": "4", "SWE_X_C": "ignored"}) == {"a": 4}
    assert parse_value("x, y", list[str]) == ["x", "y"] and parse_value('["x"]', tuple[str, ...]) == ("x",)
    assert parse_value("2.5", float | None) == 2.5 and parse_value("on", bool) is True
    assert parse_value("text", str | None) == "text" and parse_value("a", bool | str) == "a"


def test_the_pools_server_stack_is_auto_or_a_named_one():
    base = {"SWE_POOL_EXEC_URLS": "http://n:1", "SWE_EXEC_TOKEN": "e", "SWE_POOL_TOKEN": "c"}
    cfg = PoolConfig.from_env({**base, "SWE_POOL_LOOP": "asyncio", "SWE_POOL_HTTP": "h11"}).finalize()
    assert (cfg.loop, cfg.http) == ("asyncio", "h11")
    assert (PoolConfig().loop, PoolConfig().http) == ("auto", "auto")
    for name, value in (("SWE_POOL_LOOP", "trio"), ("SWE_POOL_HTTP", "h2")):
        with pytest.raises(SystemExit, match="SWE_POOL_LOOP must be"):
            PoolConfig.from_env({**base, name: value}).finalize()


def test_the_pool_refuses_a_client_token_equal_to_the_nodes_token_or_none(tmp_path):
    """Rollout workers hold the client token: it is never the exec servers' token, nor taken from it."""
    base = {"SWE_POOL_EXEC_URLS": "http://n:1", "SWE_EXEC_TOKEN": "e", "SWE_POOL_DB": str(tmp_path / "l.db")}
    with pytest.raises(SystemExit, match="no client token"):
        PoolConfig.from_env(base).finalize()  # no longer defaults to the exec token
    with pytest.raises(SystemExit, match="SWE_POOL_TOKEN equals SWE_EXEC_TOKEN"):
        PoolConfig.from_env({**base, "SWE_POOL_TOKEN": "e"}).finalize()
    for operator in ("e", "c"):
        with pytest.raises(SystemExit, match="OPERATOR_TOKEN must differ"):
            PoolConfig.from_env(
                {**base, "SWE_POOL_TOKEN": "c", "SWE_POOL_OPERATOR_TOKEN": operator}
            ).finalize()
    cfg = PoolConfig.from_env({**base, "SWE_POOL_TOKEN": "c", "SWE_POOL_OPERATOR_TOKEN": "o"}).finalize()
    assert (cfg.exec_token, cfg.pool_token, cfg.operator_token) == ("e", "c", "o")
    assert cfg.signing_key_file == str(tmp_path / "l.key")  # beside the lease database


def test_a_pool_process_with_equal_tokens_exits_with_the_reason(tmp_path):
    env = {
        **os.environ,
        "SWE_POOL_EXEC_URLS": "http://127.0.0.1:9",
        "SWE_EXEC_TOKEN": "same",
        "SWE_POOL_TOKEN": "same",
        "SWE_POOL_DB": str(tmp_path / "l.db"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "swe_rl.fleet.pool.app"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "SWE_POOL_TOKEN equals SWE_EXEC_TOKEN" in proc.stderr
    assert not (tmp_path / "l.db").exists() and not (tmp_path / "l.key").exists()  # nothing half-made
