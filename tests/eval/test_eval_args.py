"""`swe-eval`'s command line for a new user: every option explained, the common spellings, the hints."""

from __future__ import annotations

import argparse
import json

import pytest

from swe_rl.eval.eval_args import build_parser, parse_args
from swe_rl.eval.eval_swe import env_error_note, final_printout
from swe_rl.eval.image_hint import FIXTURE_BUILD, image_hint, missing_images


def test_every_option_has_help_text():
    parser = build_parser()
    options = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    assert len(options) > 30
    bare = [a.option_strings for a in options if not (a.help and a.help.strip())]
    assert not bare, f"options without help text: {bare}"


def test_limit_is_the_common_spelling_of_max_instances():
    common = ["--data", "x.jsonl", "--output-dir", "out", "--policy", "gold"]
    assert parse_args([*common, "--limit", "2"]).max_instances == 2
    assert parse_args([*common, "--max-instances", "3"]).max_instances == 3
    assert parse_args(common).max_instances is None
    with pytest.raises(SystemExit):
        parse_args([*common, "--limit", "two"])


# the pool's own answer to an allocate whose image no node has (swe_rl/fleet/pool/pool.py), as the
# agent loop records it
FIXTURE_MISSING = "ImageNotFound: allocate: image not found on any healthy node: swe-rl/fixture.jpvanhal__inflection-9001:latest"
VERIFIED_MISSING = "ImageNotFound: allocate: image not found on any healthy node: swebench/sweb.eval.x86_64.django_1776_django-11099:latest"


def test_a_missing_fixture_image_names_the_build_command():
    hint = image_hint([FIXTURE_MISSING, "something else", None], local_fleet=True)
    assert (
        hint is not None
        and FIXTURE_BUILD in hint
        and "swe-rl/fixture.jpvanhal__inflection-9001:latest" in hint
    )
    assert "this machine" in hint
    other = image_hint([VERIFIED_MISSING], local_fleet=False)
    assert other is not None and "data/pull_swe_images.sh" in other and FIXTURE_BUILD not in other
    assert image_hint(["FleetFull: every node at its cap"], local_fleet=True) is None
    assert missing_images([FIXTURE_MISSING, FIXTURE_MISSING, VERIFIED_MISSING]) == [
        "swe-rl/fixture.jpvanhal__inflection-9001:latest",
        "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
    ]


def test_the_env_error_note_of_a_run_without_images_says_how_to_build_them(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [
        {"instance_id": "a", "status": "env_error", "error": FIXTURE_MISSING},
        {"instance_id": "b", "status": "resolved"},
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    note = env_error_note(1, 2, results, local_fleet=True)
    assert (
        "1 of 2 instances ended in env_error" in note
        and f"build the bundled task images: {FIXTURE_BUILD}" in note
    )


def test_the_final_printout_has_the_format_error_totals_of_summary_json():
    summary = {
        "total": 2,
        "resolved": 1,
        "resolve_rate": 0.5,
        "no_patch_rate": 0.0,
        "patch_apply_failed_rate": 0.0,
        "error_rate": 0.0,
        "status_counts": {"resolved": 1, "unresolved": 1},
        "integrity": {},
        "format_errors": {
            "instances": 2,
            "steps": 10,
            "format_errors": 3,
            "rate": 0.3,
            "instances_with_errors": 1,
            "ended_by_format_errors": 0,
            "by_harness": {"bash_block": {}},
        },
    }
    out = final_printout(summary)
    assert out["format_errors"]["format_errors"] == 3 and out["format_errors"]["rate"] == 0.3
    assert out["format_errors"]["ended_by_format_errors"] == 0 and "by_harness" not in out["format_errors"]
