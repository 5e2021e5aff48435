"""`runner_settings` splits an ini file into lines exactly as pytest does (issue 36, class 2)."""

from __future__ import annotations

import pytest

from swe_rl.grading.runner_config import runner_lines, runner_settings

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


def test_a_value_that_only_names_the_runner_in_a_linters_section_still_does_not_count():
    assert runner_settings("setup.cfg", "[isort]\nknown_third_party = pytest\n") == {}
