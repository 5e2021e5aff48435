"""Executable pivots end to end (swe_rl/slime/pivot_exec.py): pivot rows built with their instance
(`build_pivot_dataset.py --instances`), the plugin's entry point with the scripted SGLang server and the real
Qwen tokenizer, the expert's state replayed once per group on the real fleet (fixture images) and snapshotted,
each sample's action executed in a container restored from it; then the group's samples through slime's
reward post-process and train-data conversion (restated always, the pinned slime's own when here)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import FIXTURES_JSONL, leftover_containers
from pool_fixtures import PoolProc
from test_e2e import FIX, SAMPLING, SUBMIT, TOOLZ, turn
from upstream_train import train_args, train_data_both

from swe_rl.slime.e2e import generate
from swe_rl.slime.post_process import post_process_rewards
from swe_rl.slime.reward import reward_func
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_sglang import FakeSGLang

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
GREP = "grep -n 'takewhile' toolz/itertoolz.py"
EXPERT = {
    "instance_id": TOOLZ,
    "resolved": True,
    "messages": [
        {"role": "system", "content": "You are an engineer. One ```bash block per answer."},
        {"role": "user", "content": "Fix interleave in toolz (repository at /testbed)."},
        {"role": "assistant", "content": f"Look.\n\n```bash\n{GREP}\n```", "reasoning_content": "Where?"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\n(the lines)\n</output>"},
        {"role": "assistant", "content": f"Fix.\n\n```bash\n{FIX}\n```", "reasoning_content": "Cycle."},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
        {"role": "assistant", "content": f"Done.\n\n```bash\n{SUBMIT}\n```"},
    ],
}
PY_FIX = (  # the expert's edit, spelt as a Python program: matching calls it a mismatch
    "python3 -c \"import pathlib; p = pathlib.Path('toolz/itertoolz.py'); p.write_text(p.read_text().replace("
    "'iters = itertools.takewhile(predicate, iters)', "
    "'iters = itertools.cycle(itertools.takewhile(predicate, iters))'))\""
)
AWK = "awk '/takewhile/ {print NR \":\" $0}' toolz/itertoolz.py"  # grep -n's output, another program


@pytest.fixture
def pool(fleet, pool_factory, internal_network, tmp_path) -> PoolProc:  # snapshots kept under tmp_path
    snapshots = str(tmp_path / "snapshots")
    return pool_factory(fleet(1, SWE_EXEC_NETWORKS=internal_network, SWE_EXEC_SNAPSHOT_DIR=snapshots))


def snapshot_files(tmp_path: Path) -> list[str]:
    return [f for _, _, files in os.walk(tmp_path / "snapshots") for f in files]


def build_rows(tmp_path: Path) -> list[dict[str, Any]]:
    """The expert's pivots, with their instance, built by the dataset tool as users do."""
    (tmp_path / "run" / "x").mkdir(parents=True)
    (tmp_path / "run" / "x" / "traj.json").write_text(json.dumps(EXPERT))
    command = [sys.executable, str(ROOT / "data" / "build_pivot_dataset.py"), str(tmp_path / "run")]
    command += ["--instances", str(FIXTURES_JSONL), "--output-dir", str(tmp_path / "out"), "--val-size", "0"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["executable"] == stats["pivots"] == 3
    return [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]


def group_of(row: dict[str, Any], group: int, n: int) -> list[Sample]:
    out = []
    for i in range(n):
        s = Sample(
            group_index=group,
            index=group * 10 + i,
            prompt=row["text"],
            metadata=copy.deepcopy(row["metadata"]),
        )
        s.session_id = f"g{group}-{i}"
        out.append(s)
    return out


async def play_group(plugin_env, sglang, samples: list[Sample], mode: str) -> list[Sample]:
    args = plugin_env(sglang, pivot_reward=mode)
    args.n_samples_per_prompt, args.router_policy = len(samples), "consistent_hashing"
    out = await asyncio.gather(*(generate(args, s, dict(SAMPLING)) for s in samples))
    flat = [item for x in out for item in (x if isinstance(x, list) else [x])]
    assert len(flat) == len(samples)
    return flat


def execution(s: Sample) -> dict[str, Any]:
    return s.metadata["pivot_result"].get("execution") or {}


@pytest.mark.parametrize("mode", ["execute", "execute+match"])
async def test_executable_pivot_group_is_scored_by_what_the_action_does(
    plugin_env, pool, docker_client, fixture_instances, qwen_tokenizer, tmp_path, request, mode
):
    rows = build_rows(tmp_path)
    edit, read = rows[1], rows[0]  # the expert's fix (changes the tree); its grep (a read)
    actions = {
        "g0-0": FIX,  # the expert's action: match, same outcome
        "g0-1": PY_FIX,  # the same edit spelt otherwise: mismatch, same outcome
        "g0-2": "true",  # does nothing
        "g0-3": f"cp -r toolz/tests/ /tmp/t && {FIX}",  # same tree, but it copies the tests: flagged
        "g1-0": AWK,  # the same output as the expert's grep, another program
        "g1-1": "ls",
    }
    keyed = {k: [turn("Act.", v)] for k, v in actions.items()}
    with FakeSGLang(qwen_tokenizer, [], keyed=keyed) as sglang:
        edits, reads = await asyncio.gather(
            play_group(plugin_env, sglang, group_of(edit, 0, 4), mode),
            play_group(plugin_env, sglang, group_of(read, 1, 2), mode),
        )
        args = plugin_env(sglang, pivot_reward=mode)
        rewards = await reward_func(args, edits + reads)
    categories = [s.metadata["pivot_result"]["category"] for s in edits + reads]
    assert categories == ["match", "mismatch", "mismatch", "mismatch", "mismatch", "mismatch"]
    outcomes = [execution(s).get("category") for s in edits + reads]
    assert outcomes == ["same_outcome", "same_outcome", "different_outcome", "same_outcome"] + [
        "same_outcome",
        "different_outcome",
    ]
    assert "test_edit" in execution(edits[3])["flags"]  # the monitor's flag: never paid above its match
    assert execution(edits[0])["expert_changed_tree"] and not execution(reads[0])["expert_changed_tree"]
    want = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0] if mode == "execute" else [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [s.reward["score"] for s in edits + reads] == want
    assert [r["score"] for r in rewards] == want  # reward_func gives back the stored reward
    # one replay per group: every sample of a group ran from the same snapshot, deleted after the last
    assert len({execution(s)["snapshot_id"] for s in edits}) == 1
    assert all(not s.remove_sample and s.loss_mask == [1] * s.response_length for s in edits + reads)
    assert not leftover_containers(docker_client, pool)
    assert snapshot_files(tmp_path) == []

    # the group through slime: our post-process normalises the 4 pivots of the group, and with one sample per
    # pivot (none removed) slime's default post-process gives the same numbers
    targs = train_args(4)
    _, ours = post_process_rewards(targs, edits)
    mean = sum(want[:4]) / 4
    assert all((a > 0) == (r > mean) for a, r in zip(ours, want[:4]))
    for name, data in train_data_both(request, targs, edits) + train_data_both(request, targs, edits, None):
        assert [round(float(r), 5) for r in data["rewards"]] == [round(a, 5) for a in ours], name
        assert [m.tolist() for m in data["loss_masks"]] == [s.loss_mask for s in edits], name
        assert list(data["rollout_ids"]) == [s.index for s in edits], name
        assert [t.tolist() for t in data["tokens"]] == [s.tokens for s in edits], name


async def test_unreplayable_pivots_fall_back_to_matching(
    plugin_env, pool, docker_client, fixture_instances, qwen_tokenizer, tmp_path
):
    rows = build_rows(tmp_path)
    differs = copy.deepcopy(rows[1])  # the recording says the grep failed: the replay does not reproduce it
    differs["metadata"]["pivot"]["messages"][3]["content"] = "<returncode>1</returncode>\n<output>\n</output>"
    no_instance = copy.deepcopy(rows[1])
    del no_instance["metadata"]["instance"]
    submits = rows[2]  # the expert's pivot action ends the episode: nothing to compare
    keyed = {f"g{g}-0": [turn("Act.", FIX)] for g in range(3)}
    keyed["g2-0"] = [turn("Act.", SUBMIT)]
    with FakeSGLang(qwen_tokenizer, [], keyed=keyed) as sglang:
        played = [
            await play_group(plugin_env, sglang, group_of(row, g, 1), "execute")
            for g, row in enumerate((differs, no_instance, submits))
        ]
    (a,), (b,), (c,) = played
    assert execution(a)["fallback"].startswith("unreplayable: expert step 0 returned 0, the recording 1")
    assert execution(b)["fallback"].startswith("no_instance")
    assert execution(c)["fallback"].startswith("unreplayable: the expert's pivot action submits")
    assert [s.reward["score"] for s in (a, b, c)] == [1.0, 1.0, 1.0]  # matched, as in match mode
    assert not leftover_containers(docker_client, pool)
    assert snapshot_files(tmp_path) == []


async def test_a_fleet_failure_removes_the_group_never_scores_it(
    plugin_env, pool, docker_client, fixture_instances, qwen_tokenizer, tmp_path
):
    """The expert's replay cannot get a container (the image is gone): every sample of the group is removed
    as an infrastructure failure, with the removed reward, and nothing is left behind."""
    row = build_rows(tmp_path)[1]
    row["metadata"]["instance"]["image_name"] = "swe-rl/no-such-image:latest"
    keyed = {f"g0-{i}": [turn("Act.", FIX)] for i in range(2)}
    with FakeSGLang(qwen_tokenizer, [], keyed=keyed) as sglang:
        samples = await play_group(plugin_env, sglang, group_of(row, 0, 2), "execute")
    for s in samples:
        assert s.remove_sample and s.loss_mask == [0], s.metadata["pivot_result"]
        assert s.metadata["pivot_result"]["removed_reason"].startswith("env_error: the pivot's replay failed")
        assert s.reward == {"score": 0.0, "acc": 0.0, "category": "removed", "removed": True}
    assert not leftover_containers(docker_client, pool)
    assert snapshot_files(tmp_path) == []
