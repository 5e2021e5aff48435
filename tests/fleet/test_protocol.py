"""The wire contract's shared pieces: the error body, ApiError, the token reader, the constants."""

from __future__ import annotations

import pydantic
import pytest

from swe_rl.fleet import protocol, settings


def test_api_error_carries_status_message_extra_and_headers():
    exc = protocol.ApiError(429, "node full", headers={"Retry-After": "2"}, capacity=4)
    assert (exc.status, exc.message, str(exc)) == (429, "node full", "node full")
    assert exc.headers == {"Retry-After": "2"} and exc.extra == {"capacity": 4}
    assert exc.body() == {"error": "node full", "capacity": 4}
    assert protocol.ApiError(400, "bad").headers == {}


def test_read_token_prefers_the_value_then_the_file(tmp_path, monkeypatch):
    (tmp_path / "tok").write_text("  from-file \n")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert settings.read_token(" given\n", str(tmp_path / "tok")) == "given"
    assert settings.read_token("", str(tmp_path / "tok")) == "from-file"
    assert settings.read_token("", "~/tok") == "from-file"
    assert settings.read_token("", "") == ""


def test_requests_are_frozen_with_server_defaults_left_open():
    req = protocol.ExecRequest(container_id="c1", command="echo hi")
    assert req.timeout is None and req.env == {} and req.separate_stderr is False
    with pytest.raises(pydantic.ValidationError):
        req.command = "x"  # type: ignore[misc]
    assert protocol.WarmRequest(image="img").count == 1


def test_one_value_for_what_pool_and_client_share():
    from swe_rl.fleet import client
    from swe_rl.fleet.pool import routing

    assert client.EVAL_APPLY_ALLOWANCE is protocol.EVAL_APPLY_ALLOWANCE == 900.0
    assert routing.EVAL_APPLY_ALLOWANCE is protocol.EVAL_APPLY_ALLOWANCE
    assert protocol.LABEL_MANAGED == "swe-rl.managed-by" and protocol.MANAGED_VALUE == "swe-rl"
