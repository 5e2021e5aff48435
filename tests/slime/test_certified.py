"""The slime plugin with a certification ledger (``swe_require_certified``) and a grading network.

Same set-up as test_e2e.py: a scripted SGLang router, the real Qwen tokenizer, a real
pool over a real exec server, the fixture images.
"""

from __future__ import annotations

import json

from agent_fixtures import leftover_containers
from test_e2e import FIX, SAMPLING, SUBMIT, new_sample, traj_dir, turn

from swe_rl.grading.certification import LedgerEntry
from swe_rl.slime.e2e import generate
from swe_rl.testing.fake_sglang import FakeSGLang

TOOLZ = "pytoolz__toolz-9001"
F2P = "toolz/tests/test_itertoolz.py::test_interleave_uneven_lengths"


def ledger_file(tmp_path, **entries: dict) -> str:
    path = tmp_path / f"ledger-{len(list(tmp_path.glob('ledger-*')))}.jsonl"
    path.write_text(
        "".join(LedgerEntry(instance_id=i, **e).model_dump_json() + "\n" for i, e in entries.items())
    )
    return str(path)


async def test_uncertified_instance_is_removed_without_playing(plugin_env, qwen_tokenizer, tmp_path):
    missing = ledger_file(tmp_path, **{"other": {"certified": True}})
    rejected = ledger_file(
        tmp_path, **{TOOLZ: {"certified": False, "reason": "gold not resolved in 1/3 runs"}}
    )
    for ledger, reason in ((missing, "is not in the ledger"), (rejected, "gold not resolved")):
        with FakeSGLang(qwen_tokenizer, [turn("Look.", "ls")]) as sglang:
            (s,) = await generate(plugin_env(sglang, require_certified=ledger), new_sample(), dict(SAMPLING))
        assert s.remove_sample and s.metadata["swe"]["removed_reason"].startswith("uncertified"), s.metadata
        assert reason in s.metadata["swe"]["removed_reason"] and not sglang.requests


async def test_a_failure_only_on_flaky_tests_is_removed_not_scored(
    plugin_env, qwen_tokenizer, tmp_path, pool, docker_client
):
    # the ledger says the F2P test is flaky; the agent submits without fixing: unresolved only on it
    ledger = ledger_file(tmp_path, **{TOOLZ: {"certified": True, "flaky_tests": [F2P]}})
    script = [
        turn("Edit.", "echo '# note' >> README.rst", "Touch something."),
        turn("Done.", SUBMIT, "Submit."),
    ]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        samples = await generate(plugin_env(sglang, require_certified=ledger), new_sample(), dict(SAMPLING))
    assert all(s.remove_sample for s in samples)
    assert samples[-1].metadata["swe"]["removed_reason"].startswith("flaky_only"), samples[-1].metadata["swe"]
    assert not leftover_containers(docker_client, pool, wait=15)


async def test_certified_instance_trains_and_saves_grade_artifacts(plugin_env, qwen_tokenizer, tmp_path):
    ledger = ledger_file(tmp_path, **{TOOLZ: {"certified": True}})
    script = [turn("Keep cycling.", FIX, "Fix it."), turn("Done.", SUBMIT, "Submit.")]
    with FakeSGLang(qwen_tokenizer, script) as sglang:
        samples = await generate(
            plugin_env(sglang, require_certified=ledger, grading_network="none"), new_sample(), dict(SAMPLING)
        )
    assert samples[-1].metadata["swe"]["status"] == "resolved" and not samples[-1].remove_sample
    saved = traj_dir(tmp_path)
    report = json.loads((saved / "report.json").read_text())
    assert (
        report["status"] == "resolved"
        and report["apply_strategy"] == "git apply"
        and report["network"] is False
    )
    assert "Start Test Output" in (saved / "eval.log").read_text()
