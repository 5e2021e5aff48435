"""What a user meets with a misconfigured endpoint or an alias: the tool-call warning, format-error
totals per harness, canonical harness names in every artifact (real local fleet, fixture images)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from swe_rl.eval import eval_swe, report_extras
from swe_rl.eval.tool_call_watch import ToolCallWatch
from swe_rl.fleet.local import LocalFleet
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"
THREE = "pytoolz__toolz-9001,jpvanhal__inflection-9001,more-itertools__more-itertools-9001"


@pytest.fixture(scope="module")
def fleet(docker_client):
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)
    with LocalFleet(exec_servers=1, max_containers_per_node=8) as f:
        yield f


def run_eval(fleet, out: Path, *extra: str) -> dict:
    args = eval_swe.parse_args(
        ["--data", str(FIXTURES), "--output-dir", str(out), "--max-concurrent", "2", "--no-progress", *extra]
    )
    return asyncio.run(eval_swe.run(args, fleet.client_env()))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("bash-block", "bash_block"),
        ("Bash_Block", "bash_block"),
        ("openhands", "codeact"),
        ("codeact", "codeact"),
    ],
)
def test_aliases_are_normalised_at_the_cli(typed, canonical):
    args = eval_swe.parse_args(["--data", "x", "--output-dir", "y", "--policy", "gold", "--harness", typed])
    assert args.harness == canonical


def test_canonical_harness_name_in_every_artifact(fleet, tmp_path):
    summary = run_eval(
        fleet,
        tmp_path,
        "--policy",
        "gold",
        "--harness",
        "bash-block",
        "--instance-ids",
        "pytoolz__toolz-9001",
    )
    assert summary["resolved"] == 1 and summary["meta"]["harness"] == "bash_block"
    (row,) = rows(tmp_path)
    d = tmp_path / row["dir"]
    found = {
        "results.jsonl": row["harness"],
        "run.json": json.loads((tmp_path / "run.json").read_text())["harness"],
        "meta.json": json.loads((d / "meta.json").read_text())["harness"],
        "traj.json": json.loads((d / "traj.json").read_text())["harness"],
        "summary.json": json.loads((tmp_path / "summary.json").read_text())["meta"]["harness"],
    }
    assert set(found.values()) == {"bash_block"}, found
    assert list(summary["format_errors"]["by_harness"]) == ["bash_block"]
    page = (tmp_path / "report.html").read_text()
    assert "bash_block" in page and "bash-block" not in page


def test_tool_harness_against_an_endpoint_that_ignores_tools(fleet, tmp_path, capsys):
    """The model answers in prose every time (its server dropped `tools`): a warning after the first
    N episodes naming the likely cause, and format-error totals that show it."""
    from swe_rl.testing.fake_openai import FakeOpenAI

    with FakeOpenAI(["I would look at the code first."] * 40, models=["prose"]) as server:
        summary = run_eval(
            fleet,
            tmp_path,
            "--model",
            "openai/prose",
            "--api-base",
            server.base_url,
            "--harness",
            "codeact",
            "--instance-ids",
            THREE,
            "--step-limit",
            "2",
            "--tool-call-check",
            "2",
        )
        sent = server.requests
    assert sent and all(r.get("tools") for r in sent)  # the endpoint was sent the tools every time
    err = capsys.readouterr().err
    assert err.count("never produced a tool call") == 1, err
    assert "first 2 episodes with the tool harness 'codeact'" in err and "--tool-call-parser" in err
    assert len(summary["warnings"]) == 1 and "ignores `tools`" in summary["warnings"][0]
    fe = summary["format_errors"]
    assert fe["by_harness"]["codeact"]["instances"] == 3
    assert fe["format_errors"] == fe["steps"] > 0 and fe["rate"] == 1.0 and fe["instances_with_errors"] == 3
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["format_errors"] == fe and saved["warnings"] == summary["warnings"]
    page = (tmp_path / "report.html").read_text()
    assert "never produced a tool call" in page and "Format errors" in page and "100.0%" in page


def test_no_warning_for_gold_or_bash_block(fleet, tmp_path, capsys):
    summary = run_eval(
        fleet,
        tmp_path,
        "--policy",
        "gold",
        "--harness",
        "codeact",
        "--instance-ids",
        THREE,
        "--tool-call-check",
        "1",
    )
    assert summary["resolved"] == 3 and summary["warnings"] == []
    assert "never produced a tool call" not in capsys.readouterr().err
    assert summary["format_errors"]["by_harness"]["codeact"]["format_errors"] == 0


def _agent(*steps, infra=False, messages=()):
    return SimpleNamespace(
        steps=[SimpleNamespace(format_error=e, action=a) for e, a in steps],
        messages=list(messages),
        infra_failure=infra,
    )


def test_watch_counts_only_real_episodes_and_stops_at_the_first_call():
    tools = SimpleNamespace(name="codex", tool_schemas=[{"type": "function"}])
    watch = ToolCallWatch(tools, chat_policy=True, after=2)
    assert (
        watch.observe(_agent(("it has no tool call", None), infra=True)) is None
    )  # infrastructure: not counted
    assert watch.observe(_agent(("it has no tool call", None))) is None
    assert watch.observe(_agent((None, "ls"))) is None  # one episode called a tool: no warning
    assert watch.warnings == [] and watch.seen == 2
    quiet = ToolCallWatch(tools, chat_policy=True, after=1)
    assert quiet.observe(_agent(("x", None), messages=[{"role": "assistant", "tool_calls": [{}]}])) is None
    assert not ToolCallWatch(SimpleNamespace(name="bash_block"), chat_policy=True).active
    assert not ToolCallWatch(tools, chat_policy=False).active
    assert not ToolCallWatch(tools, chat_policy=True, after=0).active


def test_summary_figures_from_rows():
    rows_ = [
        {
            "harness": "codex",
            "steps": 4,
            "format_errors": 1,
            "exit_reason": "submitted",
            "agent_seconds": 10,
            "policy_seconds": 6,
            "exec_seconds": 3,
            "grade_seconds": 5,
        },
        {"harness": "codex", "steps": 2, "format_errors": 2, "exit_reason": "format_errors"},
        {"harness": "bash_block", "steps": 10, "format_errors": 0},
        {"harness": "mini-swe-agent", "steps": 7},
    ]  # a graded prediction: no format-error count
    fe = report_extras.format_error_stats(rows_)
    assert fe["format_errors"] == 3 and fe["steps"] == 16 and fe["rate"] == round(3 / 16, 4)
    assert fe["by_harness"]["codex"] == {
        "instances": 2,
        "steps": 6,
        "format_errors": 3,
        "rate": 0.5,
        "instances_with_errors": 2,
        "ended_by_format_errors": 1,
    }
    assert "mini-swe-agent" not in fe["by_harness"]
    hist = report_extras.step_histogram(rows_)
    assert sum(b["instances"] for b in hist) == 4 and hist[0]["from"] == 2 and hist[-1]["to"] >= 10
    assert report_extras.time_split(rows_[0]) == {"model": 6.0, "commands": 3.0, "other": 1.0, "grading": 5.0}
    assert report_extras.step_histogram([]) == []
