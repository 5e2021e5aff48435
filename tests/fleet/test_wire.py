"""The wire contract, table-driven: bodies → accepted, or the 4xx status and error text the servers answer.

Pure Python (no Docker): the models of `swe_rl.fleet.protocol`, the one ValidationError → 400 mapping
(`refusal`), the node's own bounds after the model (`exec.validation`), the client's bodies built from
the same models, and the answers parsed into `swe_rl.fleet.responses`. The same bodies against real
servers: tests/fleet/test_bad_input.py, tests/fleet/exec/test_exec_server.py.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from swe_rl.fleet import client, protocol, responses
from swe_rl.fleet.errors import BadRequest, CommandRefused
from swe_rl.fleet.exec import validation
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.protocol import ApiError

CID = {"container_id": "c0ffee"}
IMG = {"image": "swe-rl/base:bookworm"}

# (model, body, error text or None when accepted); every refusal is a 400
MODEL_CASES: list[tuple[type[Any], dict[str, Any], str | None]] = [
    (protocol.ExecRequest, {**CID, "command": "ls"}, None),
    (protocol.ExecRequest, {**CID, "command": "ls", "timeout": 5, "env": {"A_1": "x"}, "user": ""}, None),
    (protocol.ExecRequest, {**CID, "command": "ls", "unknown_field": 1}, None),  # ignored, as ever
    (protocol.ExecRequest, {"command": "ls"}, "container_id must be a container id"),
    (protocol.ExecRequest, {"container_id": "a;b", "command": "ls"}, "container_id must be"),
    (protocol.ExecRequest, {**CID}, "missing or empty string field 'command'"),
    (protocol.ExecRequest, {**CID, "command": ""}, "missing or empty string field 'command'"),
    (protocol.ExecRequest, {**CID, "command": 7}, "missing or empty string field 'command'"),
    (protocol.ExecRequest, {**CID, "command": "a\x00b"}, "field 'command' contains a NUL byte"),
    (protocol.ExecRequest, {**CID, "command": "ls", "timeout": "10"}, "timeout must be a number"),
    (protocol.ExecRequest, {**CID, "command": "ls", "timeout": True}, "timeout must be a number"),
    (protocol.ExecRequest, {**CID, "command": "ls", "timeout": float("nan")}, "timeout must be a number"),
    (protocol.ExecRequest, {**CID, "command": "ls", "timeout": -1}, "timeout must be at least 0.1"),
    (protocol.ExecRequest, {**CID, "command": "ls", "env": []}, "env must map variable names to strings"),
    (protocol.ExecRequest, {**CID, "command": "ls", "env": {"1A": "x"}}, "env must map"),
    (protocol.ExecRequest, {**CID, "command": "ls", "env": {"A": 1}}, "env must map"),
    (protocol.ExecRequest, {**CID, "command": "ls", "user": "bad user;"}, "user must be a user name"),
    (
        protocol.ExecRequest,
        {**CID, "command": "ls", "separate_stderr": "yes"},
        "separate_stderr must be true",
    ),
    (
        protocol.ExecRequest,
        {**CID, "command": "ls", "max_output_bytes": 1.5},
        "max_output_bytes must be a whole",
    ),
    (protocol.ExecRequest, {**CID, "command": "ls", "workdir": "rel"}, "workdir must be an absolute path"),
    (protocol.CreateRequest, {**IMG, "memory": 1 << 30, "cpus": 1, "pids_limit": 64.0}, None),
    (protocol.CreateRequest, {}, "missing or empty string field 'image'"),
    (protocol.CreateRequest, {"image": "-bad"}, "invalid image name '-bad'"),
    (protocol.CreateRequest, {**IMG, "memory": "lots"}, "memory must look like"),
    (protocol.CreateRequest, {**IMG, "memory": True}, "memory must look like"),
    (protocol.CreateRequest, {**IMG, "cpus": 0}, "cpus must be a positive number"),
    (protocol.CreateRequest, {**IMG, "pids_limit": 1.5}, "pids_limit must be a whole number"),
    (protocol.CreateRequest, {**IMG, "network": "host"}, "network must be true/false"),
    (protocol.CreateRequest, {**IMG, "network": 5}, "network must be true/false"),
    (protocol.CreateRequest, {**IMG, "workdir": "/testbed/../proc"}, "workdir may not contain '..'"),
    (protocol.CreateRequest, {**IMG, "workdir": "/proc/self"}, "workdir may not be under /proc"),
    (protocol.CreateRequest, {**IMG, "workdir": "/" + "a" * 5000}, "workdir must be an absolute path"),
    (protocol.CreateRequest, {**IMG, "lease_id": "a b"}, "lease_id must be at most 128 characters"),
    (protocol.CreateRequest, {**IMG, "ttl": 0.5}, "ttl must be at least 1"),
    (protocol.WarmRequest, {**IMG, "count": 0}, None),
    (protocol.WarmRequest, {**IMG, "count": 1.5}, "count must be a whole number"),
    (protocol.WarmRequest, {**IMG, "count": -1}, "count must be at least 0"),
    (protocol.DiffRequest, {**CID, "base": None}, None),
    (protocol.DiffRequest, {**CID, "base": "HEAD; rm -rf /"}, "base must be a git revision"),
    (protocol.DiffRequest, {**CID, "record_baseline": 1}, "record_baseline must be true or false"),
    (protocol.WriteFileRequest, {**CID, "path": "x", "content": "hi"}, None),
    (protocol.WriteFileRequest, {**CID, "path": "x", "content_b64": "aGk="}, None),
    (
        protocol.WriteFileRequest,
        {**CID, "path": "x", "content_b64": "%%%"},
        "content_b64 is not valid base64",
    ),
    (
        protocol.WriteFileRequest,
        {**CID, "path": "x", "content_b64": 1},
        "content_b64 must be a base64 string",
    ),
    (protocol.WriteFileRequest, {**CID, "path": "x"}, "give the file as 'content'"),
    (protocol.WriteFileRequest, {**CID, "content": "x"}, "missing or empty string field 'path'"),
    (protocol.WriteFileRequest, {**CID, "path": "x" * 5000, "content": "x"}, "path is too long"),
    (protocol.WriteFileRequest, {**CID, "path": "x", "content": "x", "mode": 0.5}, "mode must be a whole"),
    (
        protocol.WriteFileRequest,
        {**CID, "path": "x", "content": "x", "mode": 0o17777},
        "mode must be at most",
    ),
    (protocol.ReadFileRequest, {**CID}, "missing or empty string field 'path'"),
    (protocol.EvaluateRequest, {**CID, "patch": "x"}, "missing or empty string field 'eval_script'"),
    (protocol.EvaluateRequest, {**CID, "eval_script": "t", "patch": 1}, "patch must be a string"),
    (protocol.TouchRequest, {"container_ids": "abc"}, "container_ids must be a list of strings"),
    (protocol.AllocateRequest, {**IMG, "request_id": "r", "expected": 3}, None),
    (protocol.AllocateRequest, {**IMG, "request_id": 7}, "request_id must be a non-empty string"),
    (protocol.AllocateRequest, {**IMG, "instance_id": "x" * 300}, "instance_id must be a non-empty string"),
    (protocol.AllocateRequest, {**IMG, "expected": -1}, "expected must be at least 0"),
    (protocol.AllocateRequest, {**IMG, "env": {"A": "\x00"}}, "field 'env' contains a NUL byte"),
    (protocol.PoolWarmRequest, {**IMG}, "missing field 'count'"),
    (protocol.PoolWarmRequest, {**IMG, "count": "many"}, "count must be a whole number"),
    (protocol.PoolWarmRequest, {**IMG, "count": 1, "memory": {"a": 1}}, "memory must look like"),
    (protocol.HeartbeatRequest, {"lease_ids": ["a", "b"]}, None),
    (protocol.HeartbeatRequest, {"lease_ids": "abc"}, "lease_ids must be a list of non-empty strings"),
    (protocol.HeartbeatRequest, {"lease_ids": [1, 2]}, "lease_ids must be a list of non-empty strings"),
    (protocol.HeartbeatRequest, {"lease_ids": [""]}, "lease_ids must be a list of non-empty strings"),
    (protocol.HeartbeatRequest, {"lease_ids": ["x"] * 10_001}, "lease_ids holds 10001 leases, at most 10000"),
    (protocol.CloseRequest, {"lease_id": 5}, "missing or empty string field 'lease_id'"),
]


@pytest.mark.parametrize("model, body, error", MODEL_CASES)
def test_model_accepts_or_refuses_with_the_servers_words(model, body, error):
    if error is None:
        assert isinstance(protocol.parse(model, body), model)
        return
    with pytest.raises(ApiError) as refused:
        protocol.parse(model, body)
    assert refused.value.status == 400 and error in refused.value.message, refused.value.message
    assert refused.value.body() == {"error": refused.value.message}


def test_a_body_with_several_mistakes_always_gets_the_first_in_field_order():
    body = {"image": "-bad", "memory": "lots", "cpus": 0}
    messages = set()
    for _ in range(3):
        with pytest.raises(ApiError) as refused:
            protocol.parse(protocol.CreateRequest, body)
        messages.add(refused.value.message)
    assert messages == {"invalid image name '-bad'"}


CFG = ExecConfig(token="t", max_timeout=600.0, networks=("swe-rl-internal",), allow_network=False)

# (validation function, body, status, error text or a check of the accepted request)
NODE_CASES: list[tuple[Any, dict[str, Any], int, Any]] = [
    (validation.exec_request, {**CID, "command": "ls"}, 200, lambda r: r.timeout == CFG.default_timeout),
    (validation.exec_request, {**CID, "command": "ls", "timeout": 601}, 400, "timeout must be between"),
    (validation.exec_request, {**CID, "command": "ls", "max_output_bytes": 1 << 40}, 400, "max_output_bytes"),
    (
        validation.create_request,
        {**IMG},
        200,
        lambda r: (r.workdir, r.memory, r.network) == ("/testbed", "4g", False),
    ),
    (
        validation.create_request,
        {**IMG, "network": "swe-rl-internal"},
        200,
        lambda r: r.network == "swe-rl-internal",
    ),
    (validation.create_request, {**IMG, "network": "other"}, 403, "network 'other' is not allowed"),
    (validation.create_request, {**IMG, "network": True}, 403, "does not allow networked containers"),
    (validation.create_request, {**IMG, "memory": "1"}, 400, "below Docker's minimum"),
    (validation.create_request, {**IMG, "memory": "100000g"}, 400, "more than this node has"),
    (validation.create_request, {**IMG, "cpus": 10_000}, 400, "cpus must be between"),
    (validation.create_request, {**IMG, "ttl": 1e9}, 400, "ttl must be between"),
    (validation.warm_request, {**IMG, "count": 2}, 200, lambda r: r.ttl == CFG.warm_ttl and r.count == 2),
    (validation.read_file_request, {**CID, "path": "/x"}, 200, lambda r: r.max_bytes == CFG.max_file_bytes),
    (
        validation.evaluate_request,
        {**CID, "eval_script": "t"},
        200,
        lambda r: (r.timeout, r.max_output_bytes) == (1800.0, CFG.max_eval_output_bytes),
    ),
]


@pytest.mark.parametrize("validate, body, status, expected", NODE_CASES)
def test_node_bounds_after_the_model(validate, body, status, expected):
    args = (body,) if validate in (validation.diff_request, validation.write_file_request) else (body, CFG)
    if status == 200:
        assert expected(validate(*args))
        return
    with pytest.raises(ApiError) as refused:
        validate(*args)
    assert refused.value.status == status and expected in refused.value.message


def test_client_bodies_come_from_the_models():
    body = client._body("exec", protocol.ExecCall, command="ls", timeout=5.0, env=None, user=None)
    assert body == {"command": "ls", "timeout": 5.0}  # the server fills in its own defaults
    split = client._body("exec", protocol.ExecCall, command="ls", separate_stderr=True, env={"A": "1"})
    assert split == {"command": "ls", "separate_stderr": True, "env": {"A": "1"}}
    assert client._body("diff", protocol.DiffCall, base=None) == {}
    assert client._body("diff", protocol.DiffCall, record_baseline=True) == {"record_baseline": True}
    text = client._body("write_file", protocol.WriteFileCall, path="/a", content="é".encode(), mode=0o755)
    assert text == {"path": "/a", "content": "é", "mode": 0o755}
    raw = client._body("write_file", protocol.WriteFileCall, path="/a", content=b"\xff\x00")
    assert raw == {"path": "/a", "content_b64": base64.b64encode(b"\xff\x00").decode()}
    # what the client sends, the server reads back to the same request
    for sent in (text, raw):
        assert protocol.WriteFileRequest.model_validate({**sent, **CID}).content in (
            "é".encode(),
            b"\xff\x00",
        )
    alloc = client._body("allocate", protocol.AllocateRequest, image="img", request_id="r", instance_id=None)
    assert alloc == {"image": "img", "request_id": "r"}


def test_client_refuses_a_bad_body_as_the_server_would_before_any_round_trip():
    with pytest.raises(CommandRefused, match="user must be a user name") as refused:
        client._body("exec", protocol.ExecCall, command="ls", user="bad user;")
    assert refused.value.status == 400
    with pytest.raises(BadRequest, match="memory must look like"):
        client._body("allocate", protocol.AllocateRequest, image="img", memory="lots")


def test_answers_parse_into_the_response_models():
    exec_answer = {"returncode": 0, "output": "ok\n", "timed_out": False, "truncated": False}
    result = client.ExecResult.from_response({**exec_answer, "output_bytes": 3, "duration": 0.1, "new": 1})
    assert result.ok and result.output == "ok\n" and result.stderr is None
    assert (
        responses.DiffResponse(patch=base64.b64encode(b"a\xff").decode(), encoding="base64").text()
        == "a\ufffd"
    )
    assert responses.ReadFileResponse(content="aGk=", encoding="base64").data() == b"hi"
    lease = responses.LeaseResponse.model_validate({"lease_id": "l", "workdir": "/testbed", "expires_at": 1})
    assert (lease.lease_id, lease.warm, lease.expires_at) == ("l", None, 1.0)
    beat = responses.HeartbeatResponse.model_validate({"ok": True, "expires_at": 5, "lost": {"a": "gone"}})
    assert beat.unknown == [] and beat.lost == {"a": "gone"}
    evaluated = client.EvalResult.from_response({"apply_status": "empty", "returncode": 0, "duration": 1})
    assert evaluated.apply_status == "empty" and evaluated.test_log == ""


def test_routed_calls_are_the_pools_container_operations():
    from swe_rl.fleet.pool.routing import ROUTED_OPS

    assert (
        set(ROUTED_OPS)
        == set(protocol.ROUTED_CALLS)
        == {"exec", "diff", "evaluate", "write_file", "read_file"}
    )
    for op, call in protocol.ROUTED_CALLS.items():
        node = {
            "exec": protocol.ExecRequest,
            "diff": protocol.DiffRequest,
            "evaluate": protocol.EvaluateRequest,
        }
        node.update({"write_file": protocol.WriteFileRequest, "read_file": protocol.ReadFileRequest})
        assert issubclass(node[op], call) and set(node[op].model_fields) - set(call.model_fields) == {
            "container_id"
        }


def test_config_replace_keeps_the_node_defaults():
    cfg = replace(CFG, allow_network=True)
    assert validation.create_request({**IMG, "network": "default"}, cfg).network is True


def test_the_pool_checks_a_file_call_without_decoding_it():
    """A routed write_file is forwarded as it came: the pool checks its shape, the node decodes it once."""
    call = protocol.WriteFileCall
    assert protocol.parse(call, {"path": "x", "content_b64": "%%%"}, protocol.FORWARDING).content == b""
    for body, error in (
        ({"path": "x", "content_b64": 1}, "content_b64 must be a base64 string"),
        ({"path": "x"}, "give the file as 'content'"),
        ({"content": "x"}, "missing or empty string field 'path'"),
    ):
        with pytest.raises(ApiError, match=error):
            protocol.parse(call, body, protocol.FORWARDING)
