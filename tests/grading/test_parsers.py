"""The parser registry (swe_rl.grading.parsers): names, shape, and the same maps as swebench 5.x's.

The 5.x comparison imports the installed swebench's own ``PARSER_REGISTRY`` and skips, saying
why, when the installed swebench is older (4.x has no registry by name).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swe_rl.grading.parsers import PARSERS, UnknownParser, parser_named, register

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"

# Lines in every shape the Python parsers read, and the traps around them.
LINES = [
    "PASSED a.py::test_one",
    "FAILED a.py::test_two - AssertionError: x - y",
    "FAILED a.py::test_sp[a b] - boom",
    "PASSED a.py::test_sp[a b]",
    "ERROR a.py::test_err - fixture 'x' not found",
    "XFAIL a.py::test_xf - reason: not yet",
    "SKIPPED [2] a.py:10: needs network",
    "SKIPPED a.py::test_skip",
    "PASSED [100%]",
    "PASSED",
    "PASSEDX a.py::odd",
    "PASSED t.py::test_p[/tmp/data/file.txt]",
    "PASSED t.py::test_p[//net/x]",
    "\x1b[32mPASSED\x1b[0m t.py::test_colour",
    "[32mPASSED[0m t.py::test_colour2",
    "t.py::test_old PASSED",
    "t.py::test_old2 some words FAILED",
    "PASSED t.py::test_mouse[MouseButton.LEFT]",
    "test_x (m.T) ... ok",
    "test_y (m.T) ... FAIL",
    "test_z (m.T) ... ERROR",
    "test_s (m.T) ... skipped 'no'",
    "test_w (m.T) ... printing",
    "ok",
    "FAIL: test_y (m.T)",
    "ERROR: test_z (m.T)",
    "--version is equivalent to version",
    "test_k (m.T) ... System check identified no issues (0 silenced)",
    "ok",
    "Applying sites.0002_alter_domain_unique...test_no_migrations (m.T) ... ok",
    "test_sym ok",
    "test_sym2 F",
    "test_sym3 E",
    "________ sympy/core/tests/test_a.py:test_sym2 ________",
    "seaborn/tests/test_a.py::test_x PASSED [ 10%]",
    "",
    "   ",
]
CORPUS = ["\n".join(LINES), "\r\n".join(LINES), *(p.read_text() for p in sorted(LOGS.glob("*.log")))]


def official_registry():
    pytest.importorskip("swebench", reason="swebench is not installed")
    try:
        from swebench.harness.log_parsers import PARSER_REGISTRY
    except ImportError:
        pytest.skip("the installed swebench is not 5.x (no PARSER_REGISTRY); pip install swebench==5.0.2")
    return PARSER_REGISTRY


def official_spec(name: str):
    from swebench.types import TestSpec

    return TestSpec(
        instance_id="o__r-1", image="img", eval_script_list=[], repo="o/r", version="1.0",
        FAIL_TO_PASS=[], PASS_TO_PASS=[], log_parser=name, eval_type="pass_and_fail",
    )  # fmt: skip


def test_every_python_parser_of_5x_is_registered_and_agrees():
    registry = official_registry()
    from swebench.harness.log_parsers import python as official_python

    names = {n for n, fn in registry.items() if fn.__module__ == official_python.__name__}
    assert names <= set(PARSERS), sorted(names - set(PARSERS))
    for name in sorted(names):
        for text in CORPUS:
            for cut in range(0, len(LINES) + 1, 3):  # prefixes too: a later line must win
                part = "\n".join(text.split("\n")[:cut]) if text is CORPUS[0] else text
                assert PARSERS[name](part) == registry[name](part, official_spec(name)), (name, cut)


def test_registered_names_are_5x_names():
    registry = official_registry()
    assert set(PARSERS) <= set(registry), sorted(set(PARSERS) - set(registry))


def test_registry_shape():
    assert parser_named("parse_log_pytest")("PASSED a::b\n") == {"a::b": "PASSED"}
    with pytest.raises(UnknownParser, match="parse_log_nope"):
        parser_named("parse_log_nope")
    with pytest.raises(ValueError, match="twice"):
        register("parse_log_pytest")(lambda log: {})
    assert all(callable(fn) for fn in PARSERS.values())
