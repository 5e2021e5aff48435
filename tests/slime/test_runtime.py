"""What the plugin reads off the slime run (swe_rl.slime.runtime), without slime installed."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from swe_rl.slime import runtime
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
def test_list_breaking_options_fail_fast_only_with_list_returns(attr, value, flag):
    args = SimpleNamespace(**{attr: value})
    with pytest.raises(ValueError, match=flag):
        check_options(args, dynamic_history=True, evaluation=False)
    check_options(args, dynamic_history=False, evaluation=False)  # one Sample per rollout: fine
    check_options(args, dynamic_history=True, evaluation=True)  # eval rollouts return one Sample


def test_our_filter_is_accepted():
    check_options(
        SimpleNamespace(dynamic_sampling_filter_path=runtime.TRAJECTORY_FILTER_PATH),
        dynamic_history=True,
        evaluation=False,
    )


def test_missing_post_process_is_warned_once(caplog, monkeypatch):
    monkeypatch.setattr(runtime, "_warned", set())
    args = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True)
    with caplog.at_level(logging.WARNING):
        check_options(args, dynamic_history=True, evaluation=False)
        check_options(args, dynamic_history=True, evaluation=False)
    assert (
        caplog.text.count("--custom-reward-post-process-path swe_rl.slime.post_process.post_process_rewards")
        == 1
    )
    caplog.clear()
    args.custom_reward_post_process_path = runtime.POST_PROCESS_PATH
    monkeypatch.setattr(runtime, "_warned", set())
    check_options(args, dynamic_history=True, evaluation=False)
    assert not caplog.text
