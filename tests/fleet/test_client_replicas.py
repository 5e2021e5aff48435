"""The client over pool replicas: a list of pool URLs, the next one when a replica does not answer.

Scripted pools on loopback (real HTTP); the "dead replica" is a loopback port nobody listens on."""

from __future__ import annotations

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from swe_rl.fleet.call_headers import CALL_ID_HEADER, RESENT_HEADER
from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.testing.loopback_server import LoopbackServer
from tests.conftest import free_port


class Replica(LoopbackServer):
    """Answers heartbeats and execs, and keeps what it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []

    def routes(self) -> list[Route]:
        async def answer(request: Request) -> JSONResponse:
            op = request.path_params["op"]
            self.seen.append((op, dict(request.headers)))
            if op == "exec":
                return JSONResponse(
                    {
                        "returncode": 0,
                        "output": "ran",
                        "timed_out": False,
                        "duration": 0.0,
                        "truncated": False,
                        "output_bytes": 3,
                    }
                )
            return JSONResponse({"ok": True, "expires_at": 1e10})

        return [Route("/{op}", answer, methods=["POST"])]


@pytest.fixture
def replica():
    with Replica() as server:
        yield server


async def test_a_replica_that_refuses_is_skipped_and_later_calls_go_to_the_next(replica):
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = EnvClientConfig(pool_url=f"{dead}, http://127.0.0.1:{replica.port}/", backoff=0.05)
    async with EnvClient(cfg) as client:
        lease = Lease(client, {"lease_id": "l-1", "workdir": "/testbed"})
        assert await lease.heartbeat() == 1e10
        result = await lease.exec(
            "echo x"
        )  # changes the container: never sent twice, but this one never left
        assert result.output == "ran"
        assert client._urls[client._current] == f"http://127.0.0.1:{replica.port}"
    assert [op for op, _ in replica.seen] == ["heartbeat", "exec"]
    exec_headers = replica.seen[1][1]
    assert CALL_ID_HEADER.lower() in exec_headers and RESENT_HEADER.lower() not in exec_headers


async def test_one_url_is_one_pool_and_no_url_is_refused(replica):
    url = f"http://127.0.0.1:{replica.port}"
    assert EnvClientConfig(pool_url=url + "/").pool_urls() == [url]
    with pytest.raises(ValueError, match="names no pool server"):
        EnvClientConfig(pool_url=" , ").pool_urls()
    async with EnvClient(EnvClientConfig(pool_url=url)) as client:
        assert await Lease(client, {"lease_id": "l-2", "workdir": "/testbed"}).heartbeat() == 1e10
