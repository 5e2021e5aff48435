"""Dashboard figures on hand-built batches: the metadata other parts add (PRM, integrity,
certification), mixes of harnesses and data sources, eval rows, and everything missing or broken.
Batches from the real fleet: tests/slime/test_metrics_fleet.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from swe_rl.metrics.rollout import (
    BREAKDOWN,
    episode_stats,
    figures,
    percentile,
    trajectories_from_rows,
    trajectories_from_samples,
)
from swe_rl.slime.metrics import (
    eval_metrics,
    log_eval_rollout_data,
    log_rollout_data,
    rollout_metrics,
)
from swe_rl.slime.samples import CompatSample as Sample

ROOT = Path(__file__).resolve().parents[2]
ARGS = SimpleNamespace(
    reward_key="score", use_wandb=True, use_tensorboard=True, wandb_always_use_train_step=False
)


def swe(status="unresolved", turns=2, **extra):
    info = {
        "status": status,
        "resolved": status == "resolved",
        "removed": False,
        "removed_reason": None,
        "aborted": False,
        "exit_reason": "submitted",
        "steps": turns,
        "format_errors": 0,
        "harness": "bash_block",
        "tokens": {"turns": turns, "segments": 1, "sampled_tokens": 10 * turns},
    }
    return {**info, **extra}


def traj(
    rid, group, info, *, steps=1, score=None, status=Sample.Status.COMPLETED, source="src-a", removed=False
):
    """`steps` step samples of one trajectory, all carrying the same metadata["swe"] (as the plugin does)."""
    score = (1.0 if info.get("resolved") else -1.0) if score is None else score
    return [
        Sample(
            group_index=group,
            index=rid,
            rollout_id=rid,
            status=status,
            remove_sample=removed,
            loss_mask=[1] * 5,
            reward={"score": score},
            metadata={"data_source": source, "swe": info},
        )
        for _ in range(steps)
    ]


def test_percentile_is_nearest_rank():
    assert [percentile([4, 1, 3, 2], p) for p in (1, 25, 50, 75, 90, 100)] == [1, 1, 2, 3, 4, 4]
    assert percentile([7], 90) == 7


def test_prm_integrity_and_certification_figures_when_their_metadata_is_there():
    prm_a = {
        "mean": 0.5,
        "steps": [
            {"step": 0, "status": "scored", "score": 1.0},
            {"step": 1, "status": "scored", "score": 0.0},
            {"step": 2, "status": "skipped", "score": None},
        ],
    }
    prm_b = {
        "mean": None,
        "steps": [
            {"step": 0, "status": "failed", "score": None},
            {"step": 1, "status": "timeout", "score": None},
            {"step": 2, "status": "scored", "score": -1.0},
        ],
    }
    batch = [
        *traj(1, 0, swe("resolved", prm=prm_a, integrity={"tampered": False, "flags": []}), steps=3),
        *traj(
            2, 0, swe(prm=prm_b, integrity={"tampered": True, "flags": ["git_history", "test_edit"]}), steps=3
        ),
        *traj(3, 0, swe(tampered=False, flags={"test_edit": True, "git_history": False}), steps=2),
        *traj(
            4,
            1,
            swe("env_error", removed=True, removed_reason="uncertified: gold fails"),
            removed=True,
            status=Sample.Status.FAILED,
            score=0.0,
        ),
    ]
    m = figures(trajectories_from_samples(batch))
    assert m["prm/steps_scored"] == 3 and m["prm/judge_failures"] == 2
    assert m["prm/judge_failure_rate"] == pytest.approx(2 / 5)
    assert m["prm/step_score_mean"] == pytest.approx(0.0)  # (1 + 0 - 1) / 3 scored steps
    assert m["integrity/tampered_rate"] == pytest.approx(1 / 3)  # of the 3 trajectories that say
    assert m["integrity/flagged_rate"] == pytest.approx(2 / 3)
    assert m["integrity/flag/test_edit_rate"] == pytest.approx(2 / 3)
    assert m["integrity/flag/git_history_rate"] == pytest.approx(1 / 3)
    assert m["integrity/certification_skips"] == 1 and m["removed/uncertified_rate"] == pytest.approx(1 / 4)
    assert m["trajectories"] == 4 and m["samples"] == 9

    plain = figures(trajectories_from_samples(traj(1, 0, swe())))
    assert not [k for k in plain if k.startswith(("prm/", "integrity/"))]


def test_zero_variance_groups_all_pass_all_fail_and_removed_outside_the_statistics():
    batch = [
        *traj(1, 0, swe("resolved"), steps=4),
        *traj(2, 0, swe("resolved"), steps=1),  # all pass
        *traj(3, 1, swe("no_patch"), steps=2),
        *traj(4, 1, swe("unresolved")),  # all fail
        *traj(5, 2, swe("resolved")),
        *traj(6, 2, swe("patch_apply_failed")),  # mixed
        *traj(
            7,
            2,
            swe("env_error", removed=True, removed_reason="env_error: node died"),
            removed=True,
            status=Sample.Status.FAILED,
            score=0.0,
        ),
        *traj(8, 2, swe(), status=Sample.Status.ABORTED, score=0.0),
    ]
    m = figures(trajectories_from_samples(batch))
    assert m["outcome/groups"] == 3
    assert m["outcome/zero_variance_group_rate"] == pytest.approx(2 / 3)
    assert m["outcome/all_pass_group_rate"] == pytest.approx(1 / 3)
    assert m["outcome/all_fail_group_rate"] == pytest.approx(1 / 3)
    assert m["outcome/group_reward_std_mean"] == pytest.approx(1 / 3)  # 0, 0, pstdev(+1, -1) = 1
    assert m["outcome/reward_mean"] == pytest.approx(0.0)  # 3 x +1, 3 x -1: the 4-step one counts once
    assert m["removed_rate"] == pytest.approx(1 / 7) and m["aborted_rate"] == pytest.approx(1 / 8)
    assert m["outcome/count/env_error"] == 1 and m["outcome/resolved_rate"] == pytest.approx(3 / 7)


def test_breakdowns_per_harness_and_per_data_source_when_mixed():
    batch = [
        *traj(1, 0, swe("resolved", harness="codeact"), source="swe-gym"),
        *traj(2, 0, swe("no_patch", format_errors=1, turns=4), source="swe-gym"),
        *traj(3, 1, swe("no_patch", harness="codeact", turns=6), source="r2e"),
    ]
    m = figures(trajectories_from_samples(batch))
    assert m["by_harness/codeact/trajectories"] == 2 and m["by_harness/codeact/resolved_rate"] == 0.5
    assert (
        m["by_harness/bash_block/format_error_rate"] == 0.25
        and m["by_harness/codeact/format_error_rate"] == 0
    )
    assert m["by_harness/codeact/turns_mean"] == 4 and m["by_harness/bash_block/no_patch_rate"] == 1
    assert m["by_source/swe-gym/trajectories"] == 2 and m["by_source/r2e/no_patch_rate"] == 1
    single = figures(trajectories_from_samples(traj(1, 0, swe())))
    assert not [k for k in single if k.startswith("by_")]


def test_compaction_warm_hits_and_model_seconds_from_the_episode_record():
    episode = {
        "turns": 3,
        "allocate_seconds": 2.0,
        "exec_seconds": 5.0,
        "grade_seconds": 9.0,
        "model_seconds_per_turn": [1.0, 2.0, 3.0],
        "warm": True,
    }
    batch = [
        *traj(1, 0, swe(tokens={"segments": 2, "sampled_tokens": 7}, episode=episode), steps=3),
        *traj(2, 0, swe(episode={**episode, "warm": False, "model_seconds_per_turn": [4.0], "turns": 1})),
    ]
    m = figures(trajectories_from_samples(batch))
    assert m["behaviour/compacted_rate"] == 0.5 and m["infra/warm_hit_rate"] == 0.5
    assert m["behaviour/turns_mean"] == 2  # the episode's answered turns win over agent steps
    assert m["infra/model_seconds_per_turn_mean"] == 2.5 and m["infra/model_seconds_per_turn_p90"] == 4.0
    assert m["infra/grade_seconds_p50"] == 9.0 and m["behaviour/sampled_tokens_max"] == 20


def test_episode_stats_counts_answered_turns_only():
    steps = [
        SimpleNamespace(action="ls", format_error=None, policy_seconds=1.25, exec_seconds=0.5),
        SimpleNamespace(action=None, format_error="no block", policy_seconds=2.0, exec_seconds=0.0),
        SimpleNamespace(action=None, format_error=None, policy_seconds=0.0, exec_seconds=0.0),
    ]  # policy failed
    agent = SimpleNamespace(steps=steps, allocate_seconds=3.14159, warm=False)
    assert episode_stats(agent, 7.0) == {
        "turns": 2,
        "allocate_seconds": 3.142,
        "exec_seconds": 0.5,
        "grade_seconds": 7.0,
        "model_seconds_per_turn": [1.25, 2.0],
        "warm": False,
    }
    assert episode_stats(SimpleNamespace(steps=[]), None)["allocate_seconds"] is None


def test_defensive_reading_pivot_and_foreign_samples_missing_rewards_and_odd_metadata():
    pivot = Sample(
        index=1,
        rollout_id=1,
        reward={"score": 0.5},
        status=Sample.Status.TRUNCATED,
        loss_mask=[1, 1, 0],
        metadata={"pivot": {"x": 1}},
    )
    bare = Sample(index=2, reward=None, metadata=None)  # type: ignore[arg-type]
    odd = Sample(
        index=3,
        rollout_id=3,
        reward={"acc": 1},
        metadata={
            "swe": {
                "status": "no_patch",
                "tokens": "n/a",
                "episode": ["bad"],
                "prm": "off",
                "integrity": 3,
                "flags": "x",
            }
        },
    )
    m = figures(trajectories_from_samples([pivot, bare, odd]))
    assert m["trajectories"] == 3 and m["outcome/no_patch_rate"] == 1.0  # only the SWE one is graded
    assert m["behaviour/truncated_rate"] == 0.0  # pivot samples have no SWE behaviour figures
    assert m["integrity/flagged_rate"] == 1.0
    assert m["outcome/reward_mean"] == 0.5  # the pivot's: the others have no score
    assert figures([]) == {"trajectories": 0.0, "samples": 0.0}


def test_hooks_return_false_and_never_raise(slime_backend, caplog):
    class Broken:
        @property
        def metadata(self):
            raise RuntimeError("boom")

    assert log_rollout_data(1, ARGS, [Broken()], None, 1.0) is False
    assert "SWE rollout metrics of rollout 1 failed" in caplog.text and not slime_backend.calls
    assert log_rollout_data(2, ARGS, traj(1, 0, swe()), None, 1.0) is False
    assert slime_backend.calls[-1].metrics["rollout/step"] == 2
    # tensorboard got every figure at the rollout's step, wandb the dict with the step key
    assert {k for k, _, step in slime_backend.tensorboard if step == 2} == set(slime_backend.wandb[-1]) - {
        "rollout/step"
    }
    assert (
        log_eval_rollout_data(3, ARGS, {"swe": {"rewards": [], "truncated": []}}, None) is False
    )  # no samples
    assert log_eval_rollout_data(3, ARGS, None, None) is False
    assert all(c.step_key == "rollout/step" for c in slime_backend.calls)


def test_without_slime_the_figures_go_to_the_log(monkeypatch, caplog):
    for name in [n for n in sys.modules if n == "slime" or n.startswith("slime.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "slime", None)  # import fails
    caplog.set_level("INFO", logger="swe_rl.slime.metrics")
    assert log_rollout_data(5, ARGS, traj(1, 0, swe("resolved")), None, 1.0) is False
    assert "rollout/swe/outcome/resolved_rate" in caplog.text


def test_eval_rows_give_the_same_figures_under_the_same_names():
    episode = {
        "turns": 2,
        "allocate_seconds": 1.0,
        "exec_seconds": 2.0,
        "grade_seconds": 3.0,
        "model_seconds_per_turn": [0.5, 1.5],
        "warm": False,
    }
    rows = [
        {
            "instance_id": "a",
            "status": "resolved",
            "resolved": True,
            "exit_reason": "submitted",
            "steps": 2,
            "harness": "bash_block",
            "format_errors": 0,
            "completion_tokens": 20,
            "data_source": "fx",
            "episode": episode,
        },
        {
            "instance_id": "b",
            "status": "no_patch",
            "resolved": False,
            "exit_reason": "step_limit",
            "steps": 2,
            "harness": "bash_block",
            "format_errors": 1,
            "completion_tokens": 20,
            "data_source": "fx",
            "episode": episode,
        },
        {"instance_id": "c", "status": "env_error", "resolved": False, "exit_reason": "crash", "steps": 0},
    ]
    from_rows = figures(trajectories_from_rows(rows))
    samples = [
        s
        for i, r in enumerate(rows)
        for s in traj(
            i,
            i,
            {
                **r,
                "removed": r["status"] == "env_error",
                "removed_reason": "env_error: crash",
                "tokens": {"sampled_tokens": r["completion_tokens"]} if "completion_tokens" in r else None,
            },
            source=r.get("data_source"),
        )
    ]
    for s in samples:
        s.reward = None  # eval rows carry no reward
        if s.metadata["swe"]["tokens"] is None:
            s.loss_mask = None  # nor a token count when the episode crashed
    from_samples = figures(trajectories_from_samples(samples))
    assert from_rows == pytest.approx(
        {k: v for k, v in from_samples.items() if k != "behaviour/truncated_rate"}
    )
    assert (
        from_rows["outcome/resolved_rate"] == pytest.approx(1 / 3) and from_rows["behaviour/turns_mean"] == 2
    )
    assert from_rows["removed_rate"] == from_rows["removed/env_error_rate"] == pytest.approx(1 / 3)
    assert "outcome/groups" not in from_rows  # one trajectory per instance: no groups


def test_eval_metrics_are_per_dataset():
    data = {"swe": {"samples": traj(1, 0, swe("resolved"))}, "other": {"samples": traj(2, 0, swe())}}
    m = eval_metrics(ARGS, data)
    assert m["eval/swe/swe/outcome/resolved_rate"] == 1.0 and m["eval/other/swe/outcome/resolved_rate"] == 0.0


def test_every_figure_name_is_documented():
    doc = (ROOT / "docs/metrics.md").read_text()
    documented = set(re.findall(r"`([a-z_]+(?:/[a-z_<>0-9.\-]+)*)`", doc))
    batch = [
        *traj(
            1,
            0,
            swe(
                "resolved",
                harness="codeact",
                prm={"steps": [{"status": "scored", "score": 1}]},
                integrity={"tampered": False, "flags": ["f"]},
                episode={
                    "turns": 2,
                    "allocate_seconds": 1,
                    "exec_seconds": 1,
                    "grade_seconds": 1,
                    "model_seconds_per_turn": [1],
                    "warm": True,
                },
            ),
        ),
        *traj(2, 0, swe(removed=True, removed_reason="uncertified"), removed=True, source="b"),
        *traj(3, 0, swe(), status=Sample.Status.ABORTED),
    ]
    names = set(rollout_metrics(ARGS, batch))
    assert len(names) > 60
    pattern = {re.sub(r"^rollout/swe/", "", n) for n in names}
    generic = {
        re.sub(r"^(removed|behaviour/exit|integrity/flag)/[^/]+_rate$", r"\1/<reason>_rate", n)
        for n in pattern
    }
    generic = {re.sub(r"^outcome/count/[a-z_]+$", "outcome/count/<status>", n) for n in generic}
    generic = {
        re.sub(
            r"^outcome/[a-z_]+_rate$",
            lambda x: x.group(0) if "group" in x.group(0) else "outcome/<status>_rate",
            n,
        )
        for n in generic
    }
    assert {n.split("/")[-1] for n in generic if n.startswith("by_")} == set(BREAKDOWN)
    generic = {re.sub(r"^(by_harness|by_source)/.*", r"\1/<name>/<figure>", n) for n in generic}
    generic |= set(BREAKDOWN)  # each short name of the breakdowns is documented too
    generic = {n.replace("integrity/flag/<reason>_rate", "integrity/flag/<flag>_rate") for n in generic}
    missing = sorted(n for n in generic if n not in documented)
    assert not missing, f"not in docs/metrics.md: {missing}"
    json.dumps(rollout_metrics(ARGS, batch))  # plain numbers


def test_the_launch_scripts_hooks_resolve_with_slimes_signatures():
    import importlib
    import inspect

    text = (ROOT / "scripts/lib/swe_rl_common.sh").read_text()
    paths = dict(re.findall(r"(ROLLOUT_LOG_PATH|EVAL_ROLLOUT_LOG_PATH):-(swe_rl\.[\w.]+)\}", text))
    arity = {
        "ROLLOUT_LOG_PATH": ["rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"],
        "EVAL_ROLLOUT_LOG_PATH": ["rollout_id", "args", "data", "extra_metrics"],
    }
    assert set(paths) == set(arity)
    for var, path in paths.items():
        module, name = path.rsplit(".", 1)
        fn = getattr(importlib.import_module(module), name)
        assert list(inspect.signature(fn).parameters) == arity[var]


def test_integrity_figures_read_the_fields_the_plugin_writes():
    """The plugin spreads `rollout_integrity(agent, grade)` into metadata["swe"]: the dashboard reads exactly that."""
    from swe_rl.metrics.integrity import rollout_integrity

    record = SimpleNamespace(
        path="conftest.py", rule="conftest", action="dropped", reason="test infrastructure"
    )
    tampering = SimpleNamespace(tamper=SimpleNamespace(records=[record]), official=None)
    clean = SimpleNamespace(tamper=SimpleNamespace(records=[]), official=None)
    probing = SimpleNamespace(flag_counts={"history_probe": 2}, steps=[], git_hygiene=None)
    quiet = SimpleNamespace(flag_counts={}, steps=[], git_hygiene=None)
    batch = [
        *traj(1, 0, swe(**rollout_integrity(quiet, tampering)), steps=2),
        *traj(2, 0, swe(**rollout_integrity(probing, clean))),
        *traj(3, 0, swe(**rollout_integrity(quiet, clean))),
    ]
    m = figures(trajectories_from_samples(batch))
    assert m["integrity/tampered_rate"] == pytest.approx(1 / 3)
    assert m["integrity/flagged_rate"] == pytest.approx(1 / 3)
    assert m["integrity/flag/history_probe_rate"] == pytest.approx(1 / 3)


def test_voided_canary_and_capability_figures_from_the_tamper_records():
    """Issue 24: the dashboard shows voided, canary-tripped and capability-flagged rates; eval's summary too."""
    from swe_rl.metrics.integrity import integrity_rates, rollout_integrity

    def graded(*records: tuple[str, str]) -> SimpleNamespace:
        recs = [
            SimpleNamespace(path="p.py", rule=rule, action=action, reason="r") for rule, action in records
        ]
        return SimpleNamespace(tamper=SimpleNamespace(records=recs), official=None)

    quiet = SimpleNamespace(flag_counts={}, steps=[], git_hygiene=None)
    rows = [
        rollout_integrity(quiet, graded(("canary", "voided"))),
        rollout_integrity(quiet, graded(("capability", "voided"))),
        rollout_integrity(quiet, graded(("capability", "noted"))),
        rollout_integrity(quiet, graded(("conftest", "dropped"))),
    ]
    assert [r["voided"] for r in rows] == [True, True, False, False]
    assert [r["canary_tripped"] for r in rows] == [True, False, False, False]
    assert [r["capability_flagged"] for r in rows] == [False, False, True, False]
    batch = [sample for i, row in enumerate(rows) for sample in traj(i + 1, 0, swe(**row))]
    m = figures(trajectories_from_samples(batch))
    assert m["integrity/voided_rate"] == pytest.approx(2 / 4)
    assert m["integrity/canary_tripped_rate"] == pytest.approx(1 / 4)
    assert m["integrity/capability_flagged_rate"] == pytest.approx(1 / 4)
    rates = integrity_rates(rows)
    assert (rates["voided_rate"], rates["canary_trip_rate"], rates["capability_flag_rate"]) == (
        0.5,
        0.25,
        0.25,
    )
