"""Who may import whom inside swe_rl: the table of docs/architecture.md, checked on every module.

Data flows one way (slime layer / eval / data -> agent -> policy, harness, environment -> fleet);
nothing below imports what is above it. A part is a package under swe_rl/ (the fleet split into its
core, exec, pool and fakes) or a top-level module. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT
from tests.package_sources import module_parts, package_files, parse

# part -> the other parts it may import (keep in step with docs/architecture.md, "Who may import whom")
ALLOWED: dict[str, set[str]] = {
    # settings.fleet_env_vars: the catalogue of every fleet object's variables, imported inside the call
    "fleet": {"fleet.exec", "fleet.pool"},
    "fleet.exec": {"fleet"},
    "fleet.pool": {"fleet"},
    "fleet.fakes": {"fleet", "fleet.exec"},
    "testing": {"configs"},  # the offline Qwen tokenizer reads the shipped chat template
    "configs": set(),  # the shipped YAML/Jinja/JSON files and the helpers that read them
    "metrics": set(),
    "tasks": set(),
    "tokens": {"configs"},
    "grading": {"fleet", "tasks"},
    "agent": {"fleet", "grading", "tasks"},
    "harnesses": {"agent", "fleet", "configs", "tasks"},
    "policies": {"agent", "fleet", "harnesses", "tasks", "tokens"},  # fleet: the retry helper
    # prm (the step judge) calls an endpoint through the fleet's one retry helper
    "rewards": {"harnesses", "fleet", "configs"},
    "slime": {
        "agent",
        "fleet",
        "grading",
        "harnesses",
        "metrics",
        "policies",
        "configs",
        "rewards",
        "tasks",
        "tokens",
    },
    "eval": {"agent", "fleet", "grading", "harnesses", "metrics", "policies", "configs", "tasks"},
    "data": {"agent", "harnesses", "rewards", "slime", "tasks", "tokens"},
}


def part_of(module: str) -> str:
    """swe_rl.fleet.pool.store -> fleet.pool; swe_rl.fleet.client -> fleet; swe_rl.tasks.rows -> tasks."""
    parts = module.split(".")[1:]
    if not parts:
        return ""
    if parts[0] == "fleet" and len(parts) > 1 and parts[1] in ("exec", "pool", "fakes"):
        return f"fleet.{parts[1]}"
    return parts[0]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of each import of swe_rl in a file (relative imports resolved)."""
    rel = module_parts(path)
    package = list(rel[:-1])
    found = []
    for node in ast.walk(parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - (node.level - 1)] + ([base] if base else []))
            # `from swe_rl import fleet` names a part through its alias
            found += [(node.lineno, f"{base}.{a.name}" if base == "swe_rl" else base) for a in node.names]
    return [(line, name) for line, name in found if name == "swe_rl" or name.startswith("swe_rl.")]


def test_every_part_is_in_the_table():
    parts = {part_of(".".join(module_parts(p))) for p in package_files()}
    parts -= {"", "__init__"}
    assert parts <= set(ALLOWED), (
        f"new parts: add them to ALLOWED and docs/architecture.md: {parts - set(ALLOWED)}"
    )


def test_no_part_imports_what_it_may_not():
    bad = []
    for path in package_files():
        source = part_of(".".join(module_parts(path)))
        for line, name in imports_of(path):
            target = part_of(name)
            if target and target != source and target not in ALLOWED.get(source, set()):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {source} imports {name}")
    assert not bad, "\n".join(bad)


def test_part_names():
    assert part_of("swe_rl.fleet.pool.store") == "fleet.pool"
    assert part_of("swe_rl.fleet.client") == "fleet" and part_of("swe_rl.fleet") == "fleet"
    assert part_of("swe_rl.tasks.rows") == "tasks" and part_of("swe_rl.rewards.prm") == "rewards"
