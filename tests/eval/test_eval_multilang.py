"""Every harness on non-Python repos: the gold policy through bash_block, codeact, codex and opencode
resolves the Go, JavaScript and Rust fixtures on a real local fleet, and the run's summary and dashboard
figures are broken down by language (the rows' ``repo_language``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from swe_rl.eval import eval_swe
from swe_rl.fleet.local import LocalFleet
from tests.conftest import ROOT

MULTILANG = ROOT / "data/fixtures/instances_multilang.jsonl"
LANGUAGES = {"go", "javascript", "rust"}


@pytest.fixture(scope="module")
def fleet(docker_client):
    with LocalFleet(exec_servers=1, max_containers_per_node=8) as f:
        yield f


@pytest.mark.parametrize("harness", ["bash_block", "codeact", "codex", "opencode"])
def test_gold_resolves_every_language_under_every_harness(fleet, tmp_path, harness):
    argv = ["--data", str(MULTILANG), "--output-dir", str(tmp_path), "--max-concurrent", "2", "--no-progress"]
    args = eval_swe.parse_args([*argv, "--policy", "gold", "--harness", harness])
    summary = asyncio.run(eval_swe.run(args, fleet.client_env()))
    results = [json.loads(x) for x in (Path(tmp_path) / "results.jsonl").read_text().splitlines()]
    assert summary["resolved"] == 3, [
        (r["instance_id"], r["status"], r.get("grade_message")) for r in results
    ]
    assert set(summary["by_language"]) == LANGUAGES
    assert all(
        part == {"finished": 1, "resolved": 1, "resolve_rate": 1.0}
        for part in summary["by_language"].values()
    )
    for language in LANGUAGES:
        assert summary["metrics"][f"by_language/{language}/resolved_rate"] == 1.0
    rows = [json.loads(x) for x in (Path(tmp_path) / "results.jsonl").read_text().splitlines()]
    assert {r["repo_language"] for r in rows} == LANGUAGES and all(r["harness"] == harness for r in rows)
