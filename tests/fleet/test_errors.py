"""The client's error tree over HTTP answers shaped as the pool relays the exec server's (a scripted
peer on loopback, no Docker): each answer becomes its typed error, and every new type is still caught
by the `except` clauses written for the old ones. The real fleet's answers: tests/agent/test_environment_parity.py."""

from __future__ import annotations

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.errors import (
    BadRequest,
    CommandRefused,
    FileNotFound,
    FleetUnavailable,
    IsADirectory,
    LeaseLost,
)
from swe_rl.testing.loopback_server import LoopbackServer


class ScriptedPool(LoopbackServer):
    """Answers each op with the (status, body) set for it."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict]] = {}

    def routes(self) -> list[Route]:
        async def answer(request: Request) -> JSONResponse:
            status, body = self.answers[request.path_params["op"]]
            return JSONResponse(body, status_code=status)

        return [Route("/{op}", answer, methods=["POST"])]


@pytest.fixture(scope="module")
def pool():
    with ScriptedPool() as pool:
        yield pool


@pytest.fixture
async def lease(pool):
    async with EnvClient(EnvClientConfig(pool_url=f"http://127.0.0.1:{pool.port}", retries=0)) as client:
        lease = Lease(client, {"lease_id": "l-1", "workdir": "/testbed"})
        lease.pool = pool
        yield lease


def test_the_tree_has_one_name_per_error():
    import swe_rl.fleet.errors as errors

    old_aliases = {
        "Env" + "Error",
        "Env" + "Unavailable",
        "File" + "Missing",
    }  # spelt apart: no rename tool rewrites them
    assert not old_aliases & set(dir(errors))
    assert issubclass(IsADirectory, BadRequest) and issubclass(CommandRefused, BadRequest)
    assert not issubclass(IsADirectory, FileNotFound) and not issubclass(CommandRefused, FleetUnavailable)


@pytest.mark.parametrize(
    "op, status, body, expected",
    [
        ("read_file", 400, {"error": "/testbed/pkg is a directory", "path": "/testbed/pkg"}, IsADirectory),
        ("write_file", 400, {"error": "path '/testbed/' names a directory"}, IsADirectory),
        ("read_file", 404, {"error": "no such file: /testbed/x", "path": "/testbed/x"}, FileNotFound),
        ("read_file", 404, {"error": "unknown lease", "lease_lost": True}, LeaseLost),
        ("read_file", 413, {"error": "/testbed/big has 9 bytes, more than the limit 1"}, BadRequest),
        ("read_file", 400, {"error": "path must be an absolute path"}, BadRequest),
        ("exec", 400, {"error": "field 'command' contains a NUL byte"}, CommandRefused),
        ("exec", 422, {"error": "no user 'nobody2' in the container"}, CommandRefused),
        ("exec", 410, {"error": "container abc no longer exists"}, LeaseLost),
        ("exec", 503, {"error": "node down", "node_down": True}, FleetUnavailable),
        ("diff", 422, {"error": "git diff failed in /testbed: not a git repository"}, BadRequest),
    ],
)
async def test_answers_become_typed_errors(lease, op, status, body, expected):
    lease.pool.answers[op] = (status, body)
    call = {
        "read_file": lambda: lease.read_file("x"),
        "write_file": lambda: lease.write_file("x", "y"),
        "exec": lambda: lease.exec("true", timeout=5),
        "diff": lease.diff,
    }[op]
    with pytest.raises(expected) as err:
        await call()
    assert type(err.value) is expected and err.value.status == status and body["error"] in str(err.value)
    if expected in (IsADirectory, CommandRefused):  # old handlers still catch them
        assert isinstance(err.value, BadRequest) and not isinstance(err.value, FleetUnavailable)
