"""Who may import whom inside swe_rl: the table of docs/architecture.md, checked on every module.

Data flows one way (slime layer / eval / data -> agent -> policy, harness, environment -> fleet);
nothing below imports what is above it. A part is a package under swe_rl/ (the fleet split into its
core, exec, pool and fakes) or a top-level module. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT
from tests.package_sources import parse

PACKAGE = ROOT / "swe_rl"

# part -> the other parts it may import (keep in step with docs/architecture.md, "Who may import whom")
ALLOWED: dict[str, set[str]] = {
    # fleet.catalogue: the catalogue of every fleet object's variables (exec and pool configs included)
    "fleet": {"fleet.exec", "fleet.pool"},
    "fleet.exec": {"fleet"},
    "fleet.pool": {"fleet"},
    "fleet.fakes": {"fleet", "fleet.exec"},
    "testing": set(),
    "configs": set(),  # data files (YAML, Jinja, JSON) read through resources
    "resources": set(),
    "shell_norm": set(),
    "rollout_metrics": set(),
    "integrity_metrics": set(),
    "tasks": set(),
    "tokens": {"resources"},
    "prm": {"fleet", "resources"},  # fleet: the one retry helper (swe_rl.fleet.retry)
    "grading": {"fleet", "tasks"},
    "agent": {"fleet", "grading", "tasks"},
    "harnesses": {"agent", "fleet", "resources", "tasks"},
    "policies": {"agent", "fleet", "harnesses", "tasks", "tokens"},  # fleet: the retry helper
    "rewards": {"harnesses", "shell_norm"},
    "slime": {
        "agent",
        "fleet",
        "grading",
        "harnesses",
        "integrity_metrics",
        "policies",
        "prm",
        "resources",
        "rewards",
        "rollout_metrics",
        "tasks",
        "tokens",
    },
    "eval": {
        "agent",
        "fleet",
        "grading",
        "harnesses",
        "integrity_metrics",
        "policies",
        "resources",
        "rollout_metrics",
        "tasks",
    },
    "data": {"agent", "harnesses", "rewards", "slime", "tasks", "tokens"},
    # deprecated entry points kept for old launch commands: they only re-export the slime layer
    "slime_plugin": {"slime"},
    "pivot": {"slime"},
    "advantages": {"slime"},
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
    rel = path.relative_to(ROOT).with_suffix("").parts
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
    parts = {part_of(".".join(p.relative_to(ROOT).with_suffix("").parts)) for p in PACKAGE.rglob("*.py")}
    parts -= {"", "__init__"}
    assert parts <= set(ALLOWED), (
        f"new parts: add them to ALLOWED and docs/architecture.md: {parts - set(ALLOWED)}"
    )


def test_no_part_imports_what_it_may_not():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = part_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for line, name in imports_of(path):
            target = part_of(name)
            if target and target != source and target not in ALLOWED.get(source, set()):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {source} imports {name}")
    assert not bad, "\n".join(bad)


def test_part_names():
    assert part_of("swe_rl.fleet.pool.store") == "fleet.pool"
    assert part_of("swe_rl.fleet.client") == "fleet" and part_of("swe_rl.fleet") == "fleet"
    assert part_of("swe_rl.tasks.rows") == "tasks" and part_of("swe_rl.prm") == "prm"
