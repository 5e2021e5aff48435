"""Timeouts of routed calls (pure; the forwarding itself is covered by test_pool_server.py)."""

from __future__ import annotations

from swe_rl.fleet.pool.routing import DEFAULT_EVAL_TIMEOUT, DEFAULT_EXEC_TIMEOUT, call_timeout
from swe_rl.fleet.protocol import EVAL_APPLY_ALLOWANCE, PLAIN_CALL_TIMEOUT


def test_exec_gets_an_explicit_timeout():
    payload: dict = {"command": "true"}
    assert call_timeout("exec", payload) == DEFAULT_EXEC_TIMEOUT
    assert payload["timeout"] == DEFAULT_EXEC_TIMEOUT  # the node's own default cannot outlast the call
    assert call_timeout("exec", {"timeout": 5}) == 5.0


def test_evaluate_adds_the_patch_apply_allowance():
    payload: dict = {}
    assert call_timeout("evaluate", payload) == DEFAULT_EVAL_TIMEOUT + EVAL_APPLY_ALLOWANCE
    assert call_timeout("evaluate", {"timeout": 60}) == 60 + EVAL_APPLY_ALLOWANCE


def test_bad_timeouts_fall_back_to_the_default_and_plain_calls_have_theirs():
    assert call_timeout("exec", {"timeout": -1}) == DEFAULT_EXEC_TIMEOUT
    assert call_timeout("exec", {"timeout": True}) == DEFAULT_EXEC_TIMEOUT
    assert call_timeout("exec", {"timeout": float("nan")}) == DEFAULT_EXEC_TIMEOUT
    for op in ("diff", "read_file", "write_file"):
        assert call_timeout(op, {"timeout": 5}) == PLAIN_CALL_TIMEOUT
