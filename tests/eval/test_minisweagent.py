"""The mini-swe-agent path end to end: the pinned PyPI release runs a fixture task with our config
against a scripted OpenAI-compatible server on loopback, in a local fixture image, and our
grader scores its prediction on a real local fleet. Plus the pieces in isolation.

Every container mini-swe-agent starts here carries a per-test label and is removed at the end,
also when the test fails.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.eval import grade_predictions
from swe_rl.fleet.local import LocalFleet
from swe_rl.testing.fake_openai import FakeOpenAI
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"
ROWS = {r["instance_id"]: r for r in map(json.loads, FIXTURES.read_text().splitlines()) if r}
PIN = re.search(r'"mini-swe-agent==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
MINI_ENV = {"MSWEA_SILENT_STARTUP": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def action(command: str, thought: str = "next step") -> str:
    """One answer in the text-based format of the pinned prompts."""
    return f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```"


SUBMIT = action("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff", "submit")


def swept(label: str) -> list[str]:
    """Remove every container with this run label; return the ids that were still there."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=swe-rl.minisweagent-run={label}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if out:
        subprocess.run(["docker", "rm", "-f", *out], capture_output=True, check=False)
    return out


@pytest.fixture(scope="module")
def minisweagent():
    """The pinned release, installed into this environment when missing."""
    os.environ.update(MINI_ENV)
    try:
        import minisweagent as mod
    except ImportError:
        p = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", f"mini-swe-agent=={PIN}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            pytest.skip(
                f"mini-swe-agent=={PIN} is not installed and pip could not install it (no package index?): "
                f"{p.stderr.strip()[-300:]}"
            )
        importlib.invalidate_caches()
        import minisweagent as mod
    assert mod.__version__ == PIN, f"installed mini-swe-agent {mod.__version__}, pinned {PIN}"
    return mod


@pytest.fixture(scope="module")
def run_mini(minisweagent):
    from swe_rl.eval import run_minisweagent

    return run_minisweagent


@pytest.fixture(scope="module")
def fixture_images(docker_client):
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)


@pytest.fixture(scope="module")
def fleet(fixture_images):
    with LocalFleet(exec_servers=1, max_containers_per_node=4) as f:
        yield f


@pytest.fixture
def label():
    value = f"pytest-{secrets.token_hex(4)}"
    yield value
    swept(value)


# ---------------------------------------------------------------------------- end to end


def test_fixture_task_through_minisweagent_then_our_grader(run_mini, fleet, tmp_path, label):
    iid = "jpvanhal__inflection-9001"
    fix = action(f"cat <<'PATCH' | git apply\n{ROWS[iid]['patch']}PATCH", "apply the fix")
    mini_dir = tmp_path / "mini"
    with FakeOpenAI([fix, SUBMIT]) as server:
        # The node script itself, as users run it (health check, model name, slicing args).
        p = subprocess.run(
            [
                "bash",
                str(ROOT / "scripts/run_minisweagent_eval.sh"),
                "--sglang-url",
                server.base_url.removesuffix("/v1"),
                "--workers",
                "1",
                "--data",
                str(FIXTURES),
                "--filter",
                "^jpvanhal__inflection-9001$",
                "--output",
                str(mini_dir),
                "--",
                "--run-label",
                label,
            ],
            env={**os.environ, **MINI_ENV, "MSWEA_PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        sent = server.requests
    assert swept(label) == [], "the driver must remove its containers itself"

    # mini-swe-agent was driven by our config: the pinned text-based prompts, our model settings.
    assert len(sent) == 2 and sent[0]["model"] == "fake" and sent[0]["temperature"] == 0.0
    assert "mswea_bash_command" in sent[0]["messages"][0]["content"]
    assert "ordinalize" in sent[0]["messages"][1]["content"]  # the problem statement
    assert "<returncode>0</returncode>" in sent[1]["messages"][-1]["content"]

    preds = json.loads((mini_dir / "preds.json").read_text())
    assert set(preds) == {iid} and preds[iid]["model_name_or_path"] == "openai/fake"
    assert preds[iid]["model_patch"].startswith("diff --git a/inflection/__init__.py")
    traj = json.loads((mini_dir / iid / f"{iid}.traj.json").read_text())
    assert traj["info"]["exit_status"] == "Submitted" and traj["info"]["mini_version"] == run_mini_version()
    run_info = json.loads((mini_dir / "minisweagent_run.json").read_text())
    assert run_info["instance_ids"] == [iid] and run_info["data"] == str(FIXTURES)

    # A second node whose image is missing: an infrastructure failure, recorded as such.
    broken_dir = tmp_path / "broken"
    broken = "pytoolz__toolz-9001"
    assert (
        run_mini.main(
            [
                "--data",
                str(FIXTURES),
                "--instance-ids",
                broken,
                "-o",
                str(broken_dir),
                "--model",
                "openai/fake",
                "--api-base",
                "http://127.0.0.1:9/v1",
                "--run-label",
                label,
                "--image-template",
                "swe-rl/missing.{id_swebench}:latest",
            ]
        )
        == 0
    )
    assert json.loads((broken_dir / "preds.json").read_text())[broken]["model_patch"] == ""

    # Hand-written predictions in SWE-bench's list format: no trajectories next to them.
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            [
                {
                    "instance_id": "more-itertools__more-itertools-9001",
                    "model_patch": "",
                    "model_name_or_path": "x",
                },
                {
                    "instance_id": "more-itertools__more-itertools-9002",
                    "model_name_or_path": "x",
                    "model_patch": "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n",
                },
            ]
        )
    )

    graded = tmp_path / "graded"
    args = grade_predictions.parse_args(
        [
            "--preds",
            str(mini_dir),
            str(broken_dir / "preds.json"),
            str(other),
            "--data",
            str(FIXTURES),
            "--output-dir",
            str(graded),
        ]
    )
    import asyncio

    summary = asyncio.run(grade_predictions.grade_all(args, fleet.client_env()))
    rows = {r["instance_id"]: r for r in map(json.loads, (graded / "results.jsonl").read_text().splitlines())}
    assert {i: r["status"] for i, r in rows.items()} == {
        iid: "resolved",
        broken: "env_error",
        "more-itertools__more-itertools-9001": "no_patch",
        "more-itertools__more-itertools-9002": "patch_apply_failed",
    }
    assert (
        rows[iid]["exit_reason"] == "submitted" and rows[iid]["steps"] == 2 and rows[iid]["prompt_tokens"] > 0
    )
    assert "FAIL_TO_PASS" in rows[iid]["grade_message"] and rows[broken]["exit_reason"] == "env_error"
    assert (graded / rows[iid]["dir"] / "patch.diff").read_text() == preds[iid]["model_patch"]
    # The same summary format as eval/eval_swe.py.
    assert summary["total"] == 4 and summary["resolve_rate"] == 0.25
    assert summary["no_patch_rate"] == 0.25 and summary["patch_apply_failed_rate"] == 0.25
    assert summary["error_rate"] == 0.25 and summary["meta"]["harness"] == "mini-swe-agent"
    assert json.loads((graded / "summary.json").read_text())["resolved_ids"] == [iid]
    assert iid in (graded / "report.html").read_text()

    # Resume: nothing is graded twice for the same patch.
    again = asyncio.run(grade_predictions.grade_all(args, fleet.client_env()))
    assert len((graded / "results.jsonl").read_text().splitlines()) == 5  # only the env_error row is retried
    assert again["resolve_rate"] == 0.25


def test_minisweagent_patch_leaves_out_the_images_build_output(run_mini, fixture_images, tmp_path, label):
    """pytoolz__toolz-9003's image has build/ and toolz.egg-info/ untracked: mini's own submit (`git add -A &&
    git diff --cached`) would carry them; the prediction is the agent's changes only, build/ edits included."""
    iid = "pytoolz__toolz-9003"
    edit = action(
        "echo '# agent' >> build/lib/toolz/dicttoolz.py && echo 'X = 1' > build/lib/toolz/new_mod.py "
        "&& sed -i 's/difference_update(keys\\[:-1\\])/difference_update(keys)/' toolz/dicttoolz.py",
        "edit",
    )
    submit = action("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached", "submit")
    with FakeOpenAI([edit, submit]) as server:
        assert (
            run_mini.main(
                [
                    "--data",
                    str(FIXTURES),
                    "--instance-ids",
                    iid,
                    "-o",
                    str(tmp_path),
                    "--model",
                    "openai/fake",
                    "--api-base",
                    server.base_url,
                    "--run-label",
                    label,
                ]
            )
            == 0
        )
    patch = json.loads((tmp_path / "preds.json").read_text())[iid]["model_patch"]
    files = re.findall(r"^diff --git a/\S+ b/(\S+)$", patch, flags=re.MULTILINE)
    assert sorted(files) == [
        "build/lib/toolz/dicttoolz.py",
        "build/lib/toolz/new_mod.py",
        "toolz/dicttoolz.py",
    ]
    assert "toolz.egg-info" not in patch
    assert swept(label) == []


def run_mini_version() -> str:
    import minisweagent

    return minisweagent.__version__


@pytest.mark.docker  # the set-up script checks the Docker daemon
def test_setup_check_only_reports_pin_config_and_served_models(minisweagent, tmp_path):
    with FakeOpenAI() as server:
        p = subprocess.run(
            [
                "bash",
                str(ROOT / "scripts/setup_minisweagent_node.sh"),
                "--check-only",
                "--venv",
                str(tmp_path / "venv"),
                "--sglang-url",
                server.base_url.removesuffix("/v1"),
            ],
            env={**os.environ, "MSWEA_PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"mini-swe-agent {PIN} | model class litellm_textbased | step limit 100" in p.stdout
    assert "serves: fake" in p.stdout


def test_run_script_fails_clearly_when_the_endpoint_is_down(minisweagent, tmp_path):
    p = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts/run_minisweagent_eval.sh"),
            "--sglang-url",
            "http://127.0.0.1:9",
            "--workers",
            "1",
            "--data",
            str(FIXTURES),
            "--output",
            str(tmp_path),
        ],
        env={**os.environ, "MSWEA_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2 and "does not answer" in p.stderr
    assert not (tmp_path / "preds.json").exists()


# ---------------------------------------------------------------------------- pieces


def test_config_layers_on_the_pinned_prompts(run_mini, tmp_path):
    args = run_mini.parse_args(
        [
            "--data",
            str(FIXTURES),
            "-o",
            str(tmp_path),
            "--model",
            "openai/Qwen3-32B",
            "--api-base",
            "http://router:30000/v1",
            "-c",
            "agent.step_limit=7",
        ]
    )
    cfg = run_mini.build_config(args, "run-1")
    assert (
        cfg["model"]["model_class"] == "litellm_textbased"
        and cfg["model"]["cost_tracking"] == "ignore_errors"
    )
    assert cfg["model"]["model_kwargs"]["api_base"] == "http://router:30000/v1"
    assert Path(cfg["model"]["litellm_model_registry"]) == ROOT / "configs/litellm.json"
    assert cfg["agent"]["step_limit"] == 7 and cfg["agent"]["cost_limit"] == 0
    assert "mswea_bash_command" in cfg["agent"]["instance_template"]  # the release's prompts
    assert cfg["environment"]["run_args"][-2:] == ["--label", "swe-rl.minisweagent-run=run-1"]
    # The registry gives local models a context size and no price.
    registry = json.loads((ROOT / "configs/litellm.json").read_text())
    assert registry["openai/Qwen3-32B"]["input_cost_per_token"] == 0.0
    assert all(e["max_input_tokens"] > 0 and e["litellm_provider"] == "openai" for e in registry.values())


@pytest.mark.slow  # runs mini-swe-agent in a subprocess: ~10 s
def test_model_without_price_is_not_an_error(run_mini):
    from minisweagent.models import get_model

    model = get_model(
        config={
            **run_mini.build_config(
                run_mini.parse_args(
                    ["--data", "x", "-o", "/tmp/unused", "--model", "openai/unregistered-model"]
                ),
                "x",
            )["model"]
        }
    )
    response = type("R", (), {"model": "unregistered-model", "usage": None})()
    assert model._calculate_cost(response) == {"cost": 0.0}


def test_slice_and_shard_split_a_dataset_exactly_once(run_mini):
    items = list(range(10))
    assert run_mini.slice_instances(items, "2:5") == [2, 3, 4]
    assert run_mini.slice_instances(items, ":3") == [0, 1, 2] and run_mini.slice_instances(items, "8:") == [
        8,
        9,
    ]
    shards = [run_mini.shard_instances(items, f"{i}/3") for i in range(3)]
    assert shards == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert run_mini.shard_instances([1], "2/3") == []
    for bad in ("5", "a:b"):
        with pytest.raises(ValueError):
            run_mini.slice_instances(items, bad)
    for bad in ("3/3", "x", "1/0"):
        with pytest.raises(ValueError):
            run_mini.shard_instances(items, bad)


def test_trajectory_facts_tell_infrastructure_from_model_failures():
    facts = grade_predictions.trajectory_facts
    assert facts(None)["exit_reason"] == "unknown"
    ok = facts(
        {
            "info": {"exit_status": "LimitsExceeded", "model_stats": {"api_calls": 100}},
            "messages": [
                {
                    "role": "assistant",
                    "extra": {
                        "timestamp": 10.0,
                        "response": {"usage": {"prompt_tokens": 5, "completion_tokens": 2}},
                    },
                },
                {
                    "role": "assistant",
                    "extra": {
                        "timestamp": 14.5,
                        "response": {"usage": {"prompt_tokens": 7, "completion_tokens": 3}},
                    },
                },
            ],
        }
    )
    assert (
        ok["exit_reason"],
        ok["steps"],
        ok["prompt_tokens"],
        ok["completion_tokens"],
        ok["agent_seconds"],
    ) == ("step_limit", 100, 12, 5, 4.5)
    assert not ok["infra_failure"]
    env = facts(
        {
            "info": {
                "exit_status": "CalledProcessError",
                "swe_rl": {"failed_in": "environment", "exception_str": "docker run failed"},
            }
        }
    )
    assert env["infra_failure"] and env["exit_reason"] == "env_error" and env["error"] == "docker run failed"
    model = facts({"info": {"exit_status": "APIConnectionError", "exception_str": "refused"}})
    assert not model["infra_failure"] and model["exit_reason"] == "policy_error"


def test_predictions_load_from_every_swebench_format(tmp_path):
    rows = [
        {"instance_id": "a__b-1", "model_patch": "diff", "model_name_or_path": "m"},
        {"instance_id": "a__b-2", "model_patch": None},
    ]
    (tmp_path / "d.json").write_text(json.dumps({r["instance_id"]: r for r in rows}))
    (tmp_path / "l.json").write_text(json.dumps(rows))
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("d.json", "l.json", "r.jsonl"):
        preds = grade_predictions.load_predictions(tmp_path / name)
        assert {k: v["model_patch"] for k, v in preds.items()} == {"a__b-1": "diff", "a__b-2": ""}
    (tmp_path / "bad.json").write_text(json.dumps([{"model_patch": "x"}]))
    with pytest.raises(ValueError, match="without instance_id"):
        grade_predictions.load_predictions(tmp_path / "bad.json")


def test_resume_runs_again_what_did_not_end_on_the_agents_terms(run_mini, tmp_path):
    statuses = {
        "a__x-1": "Submitted",
        "a__x-2": "LimitsExceeded",
        "a__x-3": "Interrupted",
        "a__x-4": "CalledProcessError",
        "a__x-5": None,
    }
    for iid, status in statuses.items():
        if status is not None:
            (tmp_path / iid).mkdir()
            (tmp_path / iid / f"{iid}.traj.json").write_text(json.dumps({"info": {"exit_status": status}}))
    assert run_mini.finished_ids(tmp_path, dict.fromkeys(statuses)) == {"a__x-1", "a__x-2"}


class _Model:
    """The smallest mini-swe-agent model: one `echo` action per call."""

    config = None

    def query(self, messages, **kw):
        return {
            "role": "assistant",
            "content": "x",
            "extra": {"actions": [{"command": "echo hi"}], "cost": 0.0},
        }

    def format_message(self, **kw):
        return kw

    def format_observation_messages(self, message, outputs, template_vars=None):
        return [{"role": "user", "content": o["output"]} for o in outputs]

    def get_template_vars(self, **kw):
        return {}

    def serialize(self):
        return {}


class _Env:
    """Executes nothing; stops the run (as Ctrl-C does) after the first command."""

    config = None

    def execute(self, action, cwd=""):
        from swe_rl.eval import run_minisweagent

        run_minisweagent._STOP.set()
        return {"output": "hi\n", "returncode": 0, "exception_info": ""}

    def get_template_vars(self, **kw):
        return {}

    def serialize(self):
        return {}


def test_a_stopping_run_ends_each_agent_at_its_next_step(run_mini):
    agent = run_mini._stoppable_agent_class()(
        _Model(), _Env(), system_template="sys", instance_template="{{task}}", step_limit=50
    )
    try:
        with pytest.raises(run_mini.RunInterrupted):
            agent.run("task")
    finally:
        run_mini._STOP.clear()
    assert agent.n_calls == 1 and agent.messages[-1]["extra"]["exit_status"] == "RunInterrupted"
