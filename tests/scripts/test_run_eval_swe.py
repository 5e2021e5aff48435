"""`eval/run_eval_swe.sh` run as a user runs it against a real fleet node and a real HTTP endpoint.

The wrapper's documented form for a fleet of nodes: `SGLANG_URL` (an OpenAI-compatible endpoint already
serving the model), `SWE_POOL_EXEC_URLS` + `SWE_EXEC_TOKEN_FILE` in the env file (the wrapper starts a pool with a client
token of its own), `PROMPT_DATA`, `OUTPUT_DIR`. Here the node is a real exec server on the real Docker
daemon and the endpoint a loopback server speaking OpenAI chat with scripted turns (SGLang cannot run
here). What must hold: the instance is solved and graded through the pool the wrapper started; the
model's name comes from the endpoint's `/models`; nothing the wrapper started is left running; an
endpoint that does not answer ends the run non-zero with a reason, never a 0% report with exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI
from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FIXTURES = ROOT / "data" / "fixtures" / "instances.jsonl"
INSTANCE = "pytoolz__toolz-9001"
FIX = (
    "sed -i 's/iters = itertools.takewhile(predicate, iters)/"
    "iters = itertools.cycle(itertools.takewhile(predicate, iters))/' toolz/itertoolz.py"
)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"


@pytest.fixture(scope="module")
def fixture_image(docker_client, base_image) -> None:
    subprocess.run(
        ["bash", str(ROOT / "data/build_fixture_images.sh"), INSTANCE], check=True, capture_output=True
    )


def wrapper(tmp_path: Path, node, endpoint: str, pool_port: int, **extra: str) -> subprocess.CompletedProcess:
    token_file = tmp_path / "exec-token"
    token_file.write_text(node.token + "\n")
    token_file.chmod(0o600)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SWE_POOL", "SWE_EXEC", "SWE_CLIENT", "SGLANG", "EVAL_", "SERVED_"))
    }
    # the fleet's settings in an env file, as an operator keeps them (`.env.swe`'s format)
    env_file = tmp_path / "env.swe"
    env_file.write_text(f"SWE_POOL_EXEC_URLS={node.url}\nSWE_EXEC_TOKEN_FILE={token_file}\n")
    env.update(
        PYTHON=os.environ.get("PYTHON", "python3"),
        SWE_ENV_FILE=str(env_file),
        PROMPT_DATA=str(FIXTURES),
        OUTPUT_DIR=str(tmp_path / "out"),
        SGLANG_URL=endpoint,
        POOL_PORT=str(pool_port),
        MAX_CONCURRENT="1",
        STEP_LIMIT="5",
        MAX_TOKENS="512",
        EXTRA_EVAL_ARGS=f"--instance-ids {INSTANCE} --no-progress",
        **extra,
    )
    return subprocess.run(
        ["bash", str(ROOT / "eval/run_eval_swe.sh")], env=env, capture_output=True, text=True, timeout=900
    )


def nothing_listens(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_the_wrapper_solves_and_grades_through_the_pool_it_starts(fixture_image, exec_server, tmp_path):
    pool_port = free_port()
    script = [ChatReply(f"Fix it.\n\n```bash\n{FIX}\n```"), ChatReply(f"Submit.\n\n```bash\n{SUBMIT}\n```")]
    with FakeOpenAI(script, models=["served-policy"]) as server:
        run = wrapper(tmp_path, exec_server, server.base_url, pool_port)
        sent = list(server.requests)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["resolved"] == 1, summary
    # the model's name was read off the endpoint's model list (no SERVED_MODEL_NAME given)
    assert sent and sent[0]["model"] == "served-policy"
    # the pool the wrapper started served the run and was stopped with it
    # (the eval knows no node: its containers came through the pool, whose lease store is in OUTPUT_DIR)
    pool_log = (tmp_path / "out" / "pool.log").read_text()
    assert (tmp_path / "out" / "leases.db").is_file()
    assert nothing_listens(pool_port)
    # the node's token never reached the eval: it held the pool's client token only
    assert exec_server.token not in run.stdout + run.stderr + pool_log


def test_an_endpoint_that_does_not_answer_ends_the_run_non_zero(exec_server, tmp_path):
    """With the model named (so the wrapper's own /models read is skipped), the eval's endpoint check
    fails before the first instance: non-zero exit naming the endpoint, no instance scored, pool stopped."""
    pool_port = free_port()
    with FakeOpenAI([]) as server:
        dead = server.base_url  # nothing listens once the block is left
    run = wrapper(tmp_path, exec_server, dead, pool_port, SERVED_MODEL_NAME="served-policy")
    assert run.returncode != 0
    assert f"the endpoint {dead} does not answer" in run.stderr, run.stderr[-2000:]
    assert "curl:" not in run.stderr  # waiting for the pool to come up prints nothing
    results = tmp_path / "out" / "results.jsonl"
    assert not results.exists() or not results.read_text().strip()
    assert nothing_listens(pool_port)


def test_without_a_model_name_an_unreachable_endpoint_is_refused_at_once(tmp_path):
    """No SERVED_MODEL_NAME and nothing at SGLANG_URL: the wrapper says so and exits 2 before starting anything."""

    class NoNode:
        url = "http://127.0.0.1:9"
        token = "t" * 32

    pool_port = free_port()
    with FakeOpenAI([]) as server:
        dead = server.base_url
    run = wrapper(tmp_path, NoNode(), dead, pool_port)
    assert run.returncode == 2
    assert "names no model" in run.stderr
    assert not (tmp_path / "out" / "pool.log").exists()
