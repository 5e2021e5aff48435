"""`runner_settings` splits an ini file into lines exactly as pytest does (issue 36, class 2)."""

from __future__ import annotations

import io

import pytest

from swe_rl.grading.scans.runner_config import runner_lines, runner_settings, universal_lines

ENDINGS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("ending", ENDINGS, ids=repr)
@pytest.mark.parametrize(
    ("name", "header"), [("setup.cfg", "[tool:pytest]"), ("tox.ini", "[pytest]"), ("pytest.ini", "[pytest]")]
)
def test_a_section_behind_any_line_ending_pytest_splits_on_is_seen(ending, name, header):
    text = f"[isort]\nprofile = black{ending}{header}{ending}addopts = -p forge\n"
    settings = runner_settings(name, text)
    assert any(k.endswith(".addopts") and "forge" in v for k, v in settings.items()), settings
    assert settings != runner_settings(name, "[isort]\nprofile = black\n")


@pytest.mark.parametrize("ending", ENDINGS, ids=repr)
def test_the_lines_are_pytests_own(ending):
    """The grader's split against the runner's parser (iniconfig, what pytest reads ini files with)."""
    iniconfig = pytest.importorskip("iniconfig")
    text = f"[isort]{ending}profile = black{ending}[tool:pytest]{ending}addopts = -p forge{ending}"
    # pytest opens the file in text mode (universal newlines) before iniconfig splits it
    runner = iniconfig.IniConfig("setup.cfg", data=text.replace("\r\n", "\n").replace("\r", "\n"))
    assert runner["tool:pytest"]["addopts"] == "-p forge"
    assert runner_lines(text).split("\n") == text.replace("\r\n", "\n").replace("\r", "\n").splitlines()
    assert runner_settings("setup.cfg", text)["tool:pytest.addopts"] == repr("-p forge")


@pytest.mark.parametrize("ending", ENDINGS, ids=repr)
def test_the_lines_of_iniconfig_1(ending):
    """iniconfig 1 (Debian bookworm's pytest 7.2) iterates the file in text mode: universal newlines only.
    A section only one of the two versions sees still counts."""
    text = f"[darglint]{ending}strictness = short{ending}[tool:pytest]{ending}addopts = -p forge{ending}"
    as_read = [line.rstrip("\n") for line in io.StringIO(text, newline=None)]  # what a text-mode file yields
    assert universal_lines(text).rstrip("\n").split("\n") == as_read
    assert any("forge" in v for v in runner_settings("setup.cfg", text).values())


def test_a_value_that_only_names_the_runner_in_a_linters_section_still_does_not_count():
    assert runner_settings("setup.cfg", "[isort]\nknown_third_party = pytest\n") == {}
