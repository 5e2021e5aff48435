"""The standalone eval end to end: a real local fleet, the bundled fixture images, gold and noop policies."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from swe_rl.eval import eval_swe
from swe_rl.fleet.local import LocalFleet
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"
IDS = [json.loads(line)["instance_id"] for line in FIXTURES.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def fixture_images(docker_client):
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)


@pytest.fixture(scope="module")
def fleet(fixture_images, internal_network):
    # the node allows the session's internal network: the fixture whose tests need one is graded on it
    with LocalFleet(
        exec_servers=1, max_containers_per_node=8, exec_env={"SWE_EXEC_NETWORKS": internal_network}
    ) as f:
        f.network = internal_network
        yield f
    # LocalFleet removed its containers; make sure of it.
    import docker

    left = [
        c
        for c in docker.from_env().containers.list(all=True, filters={"label": "swe-rl.managed-by=swe-rl"})
        if c.labels.get("swe-rl.exec-server") in f.server_ids
    ]
    assert left == []


def run_eval(fleet, out: Path, *extra: str) -> dict:
    args = eval_swe.parse_args(
        [
            "--data",
            str(FIXTURES),
            "--output-dir",
            str(out),
            "--max-concurrent",
            "2",
            "--no-progress",
            "--grading-network",
            fleet.network,
            "--agent-network",
            fleet.network,
            *extra,
        ]
    )
    return asyncio.run(eval_swe.run(args, fleet.client_env()))


def rows(out: Path) -> list[dict]:
    parsed = []
    for line in (out / "results.jsonl").read_text().splitlines():
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            assert line.startswith('{"instance_id": "torn"'), line  # only the torn line the test wrote
    return parsed


def test_gold_resolves_every_fixture_and_writes_artifacts(fleet, tmp_path):
    summary = run_eval(fleet, tmp_path, "--policy", "gold")
    assert summary["total"] == len(IDS) >= 4
    unresolved = [r for r in rows(tmp_path) if r["status"] != "resolved"]
    assert summary["resolve_rate"] == 1.0 and summary["status_counts"]["resolved"] == len(IDS), unresolved
    assert sorted(r["instance_id"] for r in rows(tmp_path)) == sorted(IDS)
    for r in rows(tmp_path):
        d = tmp_path / r["dir"]
        assert d.name.startswith(r["instance_id"] + "__")
        traj = json.loads((d / "traj.json").read_text())
        assert traj["status"] == "resolved" and traj["exit_reason"] == "submitted" and traj["steps"]
        assert traj["grade"]["fail_to_pass"]["success"]
        assert (d / "patch.diff").read_text().startswith("diff --git")
        assert json.loads((d / "meta.json").read_text())["policy"] == "gold"
        # the grade can be checked: the test log and the report, with how the patch went in
        assert ">>>>> Start Test Output" in (d / "eval.log").read_text()
        report = json.loads((d / "report.json").read_text())
        assert (
            report["status"] == "resolved"
            and report["apply_strategy"] == "git apply"
            and report["rule"] == ""
        )
        assert report["FAIL_TO_PASS"]["success"] and report["tests_status"] and report["eval_seconds"] > 0
        assert report["network"] == fleet.network and r["apply_strategy"] == "git apply"
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["resolved"] == len(IDS) and saved["avg_steps"] > 0
    assert saved["apply_strategies"] == {"git apply": len(IDS)}
    page = (tmp_path / "report.html").read_text()
    assert all(i in page for i in IDS) and "resolve rate" in page
    assert page.count("/eval.log") == len(IDS) and page.count("/report.json") == len(IDS)


def test_noop_gives_no_patch_everywhere(fleet, tmp_path):
    summary = run_eval(fleet, tmp_path, "--policy", "noop")
    assert summary["resolve_rate"] == 0.0 and summary["no_patch_rate"] == 1.0
    # no short-circuit: each instance's tests ran without a patch (the baseline), and none resolves
    assert summary["apply_strategies"] == {"none": len(IDS)}
    for r in rows(tmp_path):
        d = tmp_path / r["dir"]
        assert (d / "patch.diff").read_text() == ""
        report = json.loads((d / "report.json").read_text())
        assert report["status"] == "no_patch" and report["FAIL_TO_PASS"]["failure"] and report["tests_status"]
        assert "Start Test Output" in (d / "eval.log").read_text()


def test_certified_only_runs_the_certified_instances(fleet, tmp_path):
    from swe_rl.grading.certification import LedgerEntry

    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(
        "".join(LedgerEntry(instance_id=i, certified=i == IDS[0]).model_dump_json() + "\n" for i in IDS[:2])
    )
    summary = run_eval(fleet, tmp_path / "run", "--policy", "gold", "--certified-only", str(ledger))
    assert summary["total"] == 1 and summary["resolved"] == 1
    (row,) = rows(tmp_path / "run")
    assert row["instance_id"] == IDS[0] and row["flaky_only"] is False


def test_resume_skips_finished_and_retries_env_errors(fleet, tmp_path):
    run_eval(fleet, tmp_path, "--policy", "gold", "--max-instances", "2")
    first = {r["instance_id"] for r in rows(tmp_path)}
    assert len(first) == 2
    # An interrupted run: a torn last line, and an infrastructure failure to run again.
    env_err = IDS[2]
    with (tmp_path / "results.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": env_err, "status": "env_error"}) + "\n")
        fh.write('{"instance_id": "torn", "sta')
    # the first four rows: the two finished, the env_error one and one new (gold on every fixture through
    # eval is the test above; all of them here too cost CI a second such sweep)
    summary = run_eval(fleet, tmp_path, "--policy", "gold", "--max-instances", "4")
    assert summary["resolved"] == 4
    good = [r for r in rows(tmp_path) if "status" in r and r["status"] == "resolved"]
    counts = {i: sum(1 for r in good if r["instance_id"] == i) for i in IDS[:4]}
    assert all(n == 1 for n in counts.values()), counts  # nothing finished ran twice
    assert {r["instance_id"] for r in good} == set(IDS[:4])


def test_bad_rows_are_reported_and_the_rest_runs(fleet, tmp_path, capsys):
    data = tmp_path / "mixed.jsonl"
    good = FIXTURES.read_text().splitlines()[0]
    data.write_text("\n".join([good, "{not json", json.dumps({"instance_id": "x"})]) + "\n")
    out = tmp_path / "run"
    args = eval_swe.parse_args(
        ["--data", str(data), "--output-dir", str(out), "--policy", "gold", "--no-progress"]
    )
    summary = asyncio.run(eval_swe.run(args, fleet.client_env()))
    assert summary["total"] == 1 and summary["resolved"] == 1 and summary["load_errors"] == 2
    assert "skipped bad row" in capsys.readouterr().err


def test_missing_image_is_env_error_not_a_wrong_answer(fleet, tmp_path):
    row = json.loads(FIXTURES.read_text().splitlines()[0])
    row["image_name"] = "swe-rl/fixture.does-not-exist:latest"
    data = tmp_path / "missing.jsonl"
    data.write_text(json.dumps(row) + "\n")
    args = eval_swe.parse_args(
        ["--data", str(data), "--output-dir", str(tmp_path / "run"), "--policy", "gold", "--no-progress"]
    )
    summary = asyncio.run(eval_swe.run(args, fleet.client_env()))
    assert summary["status_counts"]["env_error"] == 1 and summary["resolved"] == 0


def test_chat_policy_needs_an_endpoint():
    with pytest.raises(SystemExit):
        eval_swe.parse_args(["--data", "x", "--output-dir", "y", "--model", "openai/qwen"])


def test_chat_model_through_an_openai_endpoint(fleet, tmp_path):
    """The CLI's chat path against a real HTTP server speaking OpenAI chat (scripted turns)."""
    from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI

    fix = (
        "sed -i 's/iters = itertools.takewhile(predicate, iters)/"
        "iters = itertools.cycle(itertools.takewhile(predicate, iters))/' toolz/itertoolz.py"
    )
    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
    script = [
        ChatReply(f"Fix it.\n\n```bash\n{fix}\n```", reasoning_content="the cycle is lost"),
        ChatReply(f"Submit.\n\n```bash\n{submit}\n```"),
    ]
    with FakeOpenAI(script, models=["fake-policy"]) as server:
        summary = run_eval(
            fleet,
            tmp_path,
            "--model",
            "openai/fake-policy",
            "--api-base",
            server.base_url,
            "--instance-ids",
            "pytoolz__toolz-9001",
            "--temperature",
            "0.3",
            "--max-tokens",
            "512",
        )
        sent = server.requests
    assert summary["resolved"] == 1 and summary["avg_steps"] == 2
    assert sent[0]["temperature"] == 0.3 and sent[0]["max_tokens"] == 512
    assert any(m.get("reasoning_content") == "the cycle is lost" for m in sent[1]["messages"])
    (row,) = rows(tmp_path)
    traj = json.loads((tmp_path / row["dir"] / "traj.json").read_text())
    assert traj["messages"][2]["reasoning_content"] == "the cycle is lost"
    assert json.loads((tmp_path / row["dir"] / "meta.json").read_text())["model"] == "openai/fake-policy"


def test_an_unreachable_endpoint_is_env_error_never_no_patch(fleet, tmp_path):
    """The endpoint gone (nothing listens; `run` skips main's check before the first instance): the
    instance is env_error (policy/PolicyUnreachable), not graded, counted in the summary (before, every
    instance was a graded empty patch: no_patch, exit 0); the endpoint checked again fails, so the run
    stops there (the rest left for a resume) and exits 3."""
    from swe_rl.testing.fake_openai import FakeOpenAI

    with FakeOpenAI([]) as server:
        dead = server.base_url  # stopped on leaving the block: connections are refused
    ids = "pytoolz__toolz-9001,pytoolz__toolz-9002,more-itertools__more-itertools-9001"
    extra = ["--model", "openai/fake", "--api-base", dead, "--instance-ids", ids, "--max-concurrent", "1"]
    summary = run_eval(fleet, tmp_path, *extra)
    assert summary["status_counts"]["env_error"] == 1 and summary["status_counts"]["no_patch"] == 0
    assert summary["env_error_kinds"] == {"policy/PolicyUnreachable": 1}
    assert summary["interrupted"] == eval_swe.ENDPOINT_LOST and summary["missing"] == 2
    (row,) = rows(tmp_path)
    assert row["status"] == "env_error" and "PolicyUnreachable" in row["error"]
    assert row["grade_message"].startswith("policy endpoint:")
    assert row["apply_strategy"] is None and not row["eval_log"]  # nothing was graded
    args = eval_swe.parse_args(["--data", "x", "--output-dir", str(tmp_path), "--policy", "noop"])
    assert eval_swe.env_error_exit(summary, args) == eval_swe.EXIT_ENV_ERROR
