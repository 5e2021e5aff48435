"""The harness registry: every entry loads and is what its traits say; names and aliases are unique and resolve."""

from __future__ import annotations

import pytest
import yaml

from swe_rl.agent.protocols import Harness, ToolHarness
from swe_rl.harnesses import registry
from swe_rl.harnesses.registry import (
    ALIASES,
    HARNESS_NAMES,
    HARNESSES,
    SHELL_TOOLS,
    TOOL_HARNESS_NAMES,
    canonical_harness_name,
    harness_by_name,
    harness_class,
    harness_spec,
    harness_tool_schemas,
)
from swe_rl.policies.gold import GoldPolicy


@pytest.mark.parametrize("name", HARNESS_NAMES)
def test_every_registered_harness_loads_and_matches_its_traits(name):
    spec = HARNESSES[name]
    harness = harness_by_name(name)
    assert type(harness) is harness_class(name)
    assert isinstance(harness, Harness)
    assert harness.name == name  # what traj.json and metadata record
    assert isinstance(harness, ToolHarness) is spec.tool_calls
    if spec.tool_calls:
        tools = {t.name: t for t in harness.tools.values()}
        assert spec.shell_tool in tools and tools[spec.shell_tool].shell
        assert [s["function"]["name"] for s in harness_tool_schemas(name)] == list(tools)
    else:
        assert spec.shell_tool is None and harness_tool_schemas(name) is None


@pytest.mark.parametrize("name", HARNESS_NAMES)
def test_a_config_file_builds_the_harness_with_its_own_config_class(name, tmp_path):
    default = harness_by_name(name)
    path = tmp_path / f"harness_{name}.yaml"
    path.write_text(yaml.safe_dump({**default.config.model_dump(), "max_observation_chars": 1234}))
    harness = harness_by_name(name, path)
    assert type(harness) is type(default) and type(harness.config) is type(default.config)
    assert harness.config.max_observation_chars == 1234


def test_names_and_aliases_are_unique_and_resolve():
    assert len(set(HARNESS_NAMES)) == len(HARNESS_NAMES) == len(HARNESSES)
    assert all(spec.name == key for key, spec in HARNESSES.items())
    aliases = [a for spec in HARNESSES.values() for a in spec.aliases]
    assert len(set(aliases)) == len(aliases) and not set(aliases) & set(HARNESS_NAMES)
    for alias, name in ALIASES.items():
        assert canonical_harness_name(alias) == name
        assert harness_spec(alias) is HARNESSES[name]
    assert canonical_harness_name("openhands") == "codeact"
    assert canonical_harness_name(" Bash-Block ") == "bash_block"
    with pytest.raises(ValueError, match="unknown harness"):
        canonical_harness_name("nope")
    assert harness_tool_schemas("nope") is None and harness_tool_schemas(None) is None


def test_derived_lists_come_from_the_table():
    assert TOOL_HARNESS_NAMES == ("codeact", "codex", "opencode")
    assert SHELL_TOOLS == (
        "execute_bash",
        "shell_command",
        "bash",
    )  # the order the gold policy looks them up in
    assert len(set(SHELL_TOOLS)) == len(SHELL_TOOLS)


async def test_a_new_entry_is_all_a_new_harness_needs(monkeypatch):
    """One more `HarnessSpec` (here an alias of an existing class) is found by name, alias and traits."""
    spec = registry.HarnessSpec(
        "codex2",
        "swe_rl.harnesses.codex:CodexHarness",
        registry._TOOL_CONFIG,
        tool_calls=True,
        shell_tool="shell_command",
        aliases=("codex-two",),
    )
    monkeypatch.setitem(registry.HARNESSES, "codex2", spec)
    monkeypatch.setitem(registry.ALIASES, "codex_two", "codex2")
    assert canonical_harness_name("codex-two") == "codex2"
    assert isinstance(harness_by_name("codex2"), ToolHarness)
    turn = await GoldPolicy().act([], tools=harness_tool_schemas("codex2"))
    assert turn.tool_calls and turn.tool_calls[0]["function"]["name"] == "shell_command"
