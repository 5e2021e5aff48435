"""What the plugin reads off the slime run (swe_rl.slime.runtime), without slime installed."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from swe_rl.slime import estimators, runtime
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.runtime import check_options, routing_headers, slime_aborting


def test_routing_key_only_under_consistent_hashing():
    sample = SimpleNamespace(session_id="abc")
    assert routing_headers(SimpleNamespace(router_policy="consistent_hashing"), sample) == {
        "X-SMG-Routing-Key": "abc"
    }
    assert routing_headers(SimpleNamespace(router_policy="cache_aware"), sample) == {}
    assert routing_headers(SimpleNamespace(), sample) == {}
    assert (
        routing_headers(SimpleNamespace(router_policy="consistent_hashing"), SimpleNamespace(session_id=None))
        == {}
    )


def test_without_slime_nothing_is_aborting():
    assert slime_aborting(SimpleNamespace()) is False


def config(**swe) -> PluginConfig:
    return PluginConfig.from_sources(SimpleNamespace(**{f"swe_{k}": v for k, v in swe.items()}), env={})


@pytest.mark.parametrize(
    "attr, value, flag",
    [
        ("group_rm", True, "--group-rm"),
        ("partial_rollout", True, "--partial-rollout"),
        (
            "dynamic_sampling_filter_path",
            "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std",
            "swe_rl.slime.filters.check_trajectory_reward_nonzero_std",
        ),
    ],
)
@pytest.mark.parametrize("samples", ["segment", "turn"])
def test_list_breaking_options_fail_fast_only_with_list_returns(attr, value, flag, samples):
    args = SimpleNamespace(**{attr: value})
    with pytest.raises(ValueError, match=flag):
        check_options(args, config(samples=samples), evaluation=False)
    check_options(args, config(samples="last"), evaluation=False)  # one Sample per rollout: fine
    check_options(args, config(samples=samples), evaluation=True)  # eval rollouts return one Sample


def test_our_filter_is_accepted():
    check_options(
        SimpleNamespace(dynamic_sampling_filter_path=runtime.TRAJECTORY_FILTER_PATH),
        config(),
        evaluation=False,
    )


@pytest.mark.parametrize("samples", ["segment", "turn"])
def test_a_multi_sample_mode_without_the_post_process_stops_unless_allowed(caplog, monkeypatch, samples):
    monkeypatch.setattr(runtime, "_warned", set())
    args = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True)
    with pytest.raises(ValueError, match="--custom-reward-post-process-path") as err:
        check_options(args, config(samples=samples), evaluation=False)
    assert "swe_allow_step_advantages" in str(err.value) and runtime.POST_PROCESS_PATH in str(err.value)
    check_options(args, config(samples="last"), evaluation=False)  # one sample per rollout: rows fit
    check_options(args, config(samples=samples), evaluation=False, several=False)  # pivot: a list of one
    check_options(SimpleNamespace(advantage_estimator="ppo"), config(samples=samples), evaluation=False)
    with caplog.at_level(logging.WARNING):  # the explicit override: a warning, once
        check_options(args, config(samples=samples, allow_step_advantages=True), evaluation=False)
        check_options(args, config(samples=samples, allow_step_advantages=True), evaluation=False)
    assert len(caplog.records) == 1 and "--custom-reward-post-process-path" in caplog.text
    caplog.clear()
    args.custom_reward_post_process_path = runtime.POST_PROCESS_PATH
    check_options(args, config(samples=samples), evaluation=False)
    assert not caplog.text


def test_another_post_process_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(runtime, "_warned", set())
    args = SimpleNamespace(
        advantage_estimator="grpo",
        rewards_normalization=True,
        custom_reward_post_process_path="my_pkg.rewards.normalise",
    )
    with pytest.raises(ValueError, match="my_pkg.rewards.normalise, which is not the project's") as err:
        check_options(args, config(), evaluation=False)
    assert runtime.POST_PROCESS_PATH in str(err.value)
    check_options(args, config(samples="last"), evaluation=False)  # rows of one sample: slime's own works
    args.custom_reward_post_process_path = runtime.POST_PROCESS_PATH
    check_options(args, config(), evaluation=False)


OURS = {"rewards_normalization": True, "custom_reward_post_process_path": runtime.POST_PROCESS_PATH}


@pytest.mark.parametrize(
    "slime_args, named",
    [
        ({"advantage_estimator": "gspo"}, "--advantage-estimator gspo"),
        ({"advantage_estimator": "grpo", "use_opsm": True}, "--use-opsm"),
        ({"advantage_estimator": "gspo", "use_opsm": True}, "--advantage-estimator gspo and --use-opsm"),
    ],
)
def test_a_sequence_level_ratio_is_refused_when_a_trajectory_is_several_samples(slime_args, named):
    args = SimpleNamespace(**OURS, **slime_args)
    for cfg in (config(), config(samples="turn"), config(prm={"enable": True, "url": "http://j:1/v1"})):
        with pytest.raises(ValueError, match=named) as err:
            check_options(args, cfg, evaluation=False)
        assert "swe_context_management: false" in str(err.value) and "swe_samples: last" in str(err.value)
    # the settings it names make every trajectory one sample: then the ratio is the trajectory's
    check_options(args, config(context_management=False), evaluation=False)
    check_options(args, config(samples="last"), evaluation=False)
    check_options(args, config(), evaluation=True)  # eval trains nothing
    check_options(args, config(), evaluation=False, several=False)  # a pivot row is one turn


def test_token_level_ratios_are_accepted_with_segment_samples():
    for estimator in ("grpo", "cispo"):
        check_options(SimpleNamespace(**OURS, advantage_estimator=estimator), config(), evaluation=False)


def test_sample_mode(caplog, monkeypatch):
    monkeypatch.setattr(runtime, "_warned", set())
    assert runtime.sample_mode(config(), evaluation=False) == "segment"
    assert runtime.sample_mode(config(), evaluation=True) == "last"
    assert runtime.sample_mode(config(samples="turn"), evaluation=False) == "turn"
    with caplog.at_level(logging.WARNING):
        # the pinned slime trains one advantage per sample: PRM step bonuses need per-turn samples
        prm = config(prm={"enable": True, "url": "http://judge:30010/v1"})
        assert runtime.sample_mode(prm, evaluation=False) == "turn"
        assert runtime.sample_mode(config(samples="last"), evaluation=False) == "last"
    assert "per-turn samples" in caplog.text and "earlier segments" in caplog.text


def test_prompt_order_reads_the_prompt_data_rows_for_prefetch_hints(tmp_path):
    import json

    rows = [
        {
            "metadata": {
                "instance": {
                    "instance_id": "a__b-1",
                    "repo": "a/b",
                    "base_commit": "c",
                    "problem_statement": "p",
                    "image_name": "r/a:1",
                    "FAIL_TO_PASS": ["t"],
                }
            }
        },
        {
            "metadata": json.dumps(
                {
                    "instance": {
                        "instance_id": "a__b-2",
                        "repo": "a/b",
                        "base_commit": "c",
                        "problem_statement": "p",
                        "FAIL_TO_PASS": ["t"],
                    }
                }
            )
        },
        "not json",
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    order = runtime._prompt_order(SimpleNamespace(prompt_data=str(path)))
    assert [key for key, _ in order] == ["a__b-1", "a__b-2"] and order[0][1] == "r/a:1"
    assert runtime._prompt_order(SimpleNamespace()) == []
    assert runtime._prompt_order(SimpleNamespace(prompt_data=str(tmp_path / "missing.jsonl"))) == []


@pytest.mark.parametrize("samples", ["segment", "turn"])
def test_slimes_fully_async_worker_needs_one_sample_per_rollout(samples):
    """At the pin its collector sorts groups by ``item.index`` and requeues by ``item.status``: a list item
    (our segments) stops it (tests/slime/test_fully_async.py runs it with swe_samples: last)."""
    args = SimpleNamespace(**OURS, rollout_function_path=runtime.FULLY_ASYNC_PATH)
    with pytest.raises(ValueError, match="swe_samples: last") as err:
        check_options(args, config(samples=samples), evaluation=False)
    assert runtime.OUR_FULLY_ASYNC_PATH in str(err.value)
    check_options(args, config(samples="last"), evaluation=False)
    args.rollout_function_path = runtime.OUR_FULLY_ASYNC_PATH  # slime's worker, a collector reading lists
    check_options(args, config(samples=samples), evaluation=False)


@pytest.mark.parametrize(
    "slime_args, named",
    [
        ({"use_opd": True, "opd_type": "sglang"}, "--opd-type megatron"),
        (
            {
                "custom_tis_function_path": "examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp",
                "use_tis": True,
                "tis_level": "geometric",
                "use_rs": True,
                "rs_level": "token",
                "rs_veto_threshold": 1e-4,
            },
            "tis_level: token, rs_level: token and rs_veto_threshold: null",
        ),
        (
            {
                "advantage_estimator": "grpo",
                "custom_advantage_function_path": estimators.REINFORCE_PLUS_PLUS_PATH,
            },
            "reinforce_plus_plus",
        ),
    ],
)
def test_corrections_that_act_per_sample_are_refused(slime_args, named):
    args = SimpleNamespace(**OURS, **slime_args)
    with pytest.raises(ValueError, match=named):
        check_options(args, config(), evaluation=False)
    if not slime_args.get("use_opd") and "custom_advantage_function_path" not in slime_args:
        check_options(args, config(samples="last"), evaluation=False)  # one sample per trajectory: exact
    ok = {**slime_args, "tis_level": "token", "rs_veto_threshold": None} if "use_tis" in slime_args else None
    if ok is not None:
        check_options(SimpleNamespace(**OURS, **ok), config(), evaluation=False)  # per token: exact
