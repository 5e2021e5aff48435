"""pyproject lists every package by hand (the configs live in the top-level configs/ and ship as
swe_rl.configs, which automatic discovery cannot do): a new subpackage missing from the list would be
left out of the wheel silently, so this fast check names it."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def packages_on_disk() -> set[str]:
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "swe_rl").rglob("__init__.py")}
    return found | {"swe_rl.configs"}


def test_every_package_is_listed_and_nothing_else():
    listed = set(SETUPTOOLS["packages"])
    assert not packages_on_disk() - listed, (
        f"add to [tool.setuptools] packages: {packages_on_disk() - listed}"
    )
    assert not listed - packages_on_disk(), f"listed but gone: {listed - packages_on_disk()}"


def test_the_configs_ship_from_the_top_level_folder_as_one_copy():
    assert SETUPTOOLS["package-dir"] == {"swe_rl.configs": "configs"}
    assert (ROOT / "configs" / "__init__.py").is_file() and (ROOT / "configs" / "plugin_swe.yaml").is_file()
    assert not (ROOT / "swe_rl" / "configs").exists()  # one copy: nothing left inside the package folder
    shipped = set(SETUPTOOLS["package-data"]["swe_rl.configs"])
    data = {p.name for p in (ROOT / "configs").iterdir() if p.suffix != ".py" and p.name != "__pycache__"}
    assert all(any(p.match(pattern) for pattern in shipped) for p in map(ROOT.joinpath, data)), data
