"""The settings tables of the docs against the config models: the fleet's in docs/fleet.md, the plugin's
in docs/training.md, the sandbox's in docs/slime_agent_sandbox.md. Every variable a model reads is
documented, every documented variable is read, old names only in the "Renamed variables" note."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swe_rl.fleet.client import CLIENT_ENV
from swe_rl.fleet.exec.config import ENV as EXEC_ENV
from swe_rl.fleet.pool.config import ENV as POOL_ENV
from swe_rl.fleet.sandbox import AGENT_GENERATE_ENV, SANDBOX_ENV
from swe_rl.fleet.settings import EnvVar, renamed_vars
from swe_rl.slime.config import PluginConfig

ROOT = Path(__file__).resolve().parents[1]
FLEET_DOC = ROOT / "docs" / "fleet.md"
TRAINING_DOC = ROOT / "docs" / "training.md"
VAR = re.compile(r"SWE_[A-Z0-9_]*[A-Z0-9]")


def tables(path: Path) -> list[tuple[str, list[str]]]:
    """(the paragraph just before the table, first cell of each row) for every Markdown table."""
    out: list[tuple[str, list[str]]] = []
    paragraph: list[str] = []
    rows: list[str] | None = None
    ended = False  # a blank line ended the paragraph (kept until the next one starts)
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if line.startswith("|"):
            if rows is None:
                rows = []
                out.append((" ".join(paragraph), rows))
            cell = line.strip("|").split("|")[0].strip()
            if not set(cell) <= set("- :"):
                rows.append(cell)
            continue
        rows = None
        if not line.strip():
            ended = True
        else:
            paragraph, ended = ([line] if ended else paragraph + [line]), False
    return out


def table(path: Path, caption: str) -> list[str]:
    found = [rows for before, rows in tables(path) if caption in before]
    assert len(found) == 1, f"{path.name}: one table after a paragraph with {caption!r}, found {len(found)}"
    return found[0][1:]  # the header row is not a setting


def documented(rows: list[str]) -> set[str]:
    return {name for row in rows for name in VAR.findall(row)}


def read_by(*specs: dict[str, EnvVar]) -> set[str]:
    return {
        name
        for spec in specs
        for var in spec.values()
        for name in (var.name,) + ((var.file,) if var.file else ())
    }


@pytest.mark.parametrize(
    "caption, spec",
    [("Exec server settings", EXEC_ENV), ("Pool settings", POOL_ENV), ("Client settings", CLIENT_ENV)],
    ids=["exec", "pool", "client"],
)
def test_fleet_tables_match_the_models(caption, spec):
    names = documented(table(FLEET_DOC, caption))
    if caption == "Exec server settings":  # the image settings have their own page
        names |= documented(table(ROOT / "docs" / "images.md", "Image settings of the exec server"))
    assert names == read_by(spec)


def test_sandbox_table_matches_the_model():
    names = documented(table(ROOT / "docs" / "slime_agent_sandbox.md", "## Settings"))
    assert {n for n in names if n.startswith("SWE_FLEET_SANDBOX_")} == read_by(
        SANDBOX_ENV, AGENT_GENERATE_ENV
    )
    assert {n for n in names if not n.startswith("SWE_FLEET_SANDBOX_")} <= read_by(CLIENT_ENV) | {
        "SWE_EXEC_NETWORKS"
    }


def test_plugin_table_matches_the_model():
    rows = table(TRAINING_DOC, "Plugin settings") + table(
        ROOT / "docs" / "images.md", "Plugin image settings"
    )
    keys = {key for row in rows for key in re.findall(r"`([a-z_]+)`", row)}
    assert keys == set(PluginConfig.model_fields)


def test_old_names_only_in_the_renamed_note():
    fleet_doc = FLEET_DOC.read_text(encoding="utf-8")
    renamed = {
        **renamed_vars(POOL_ENV),
        **renamed_vars(EXEC_ENV),
        **renamed_vars(CLIENT_ENV),
        **renamed_vars(SANDBOX_ENV),
    }
    assert renamed  # the pool's five, at least
    note = fleet_doc[fleet_doc.index("Renamed variables") :]
    note = note[: note.index("\n\n")]
    for old, new in renamed.items():
        assert f"`{old}` → `{new}`" in note
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documented_anywhere = set().union(*(documented(rows) for doc in docs for _, rows in tables(doc)))
    assert not documented_anywhere & set(renamed)
