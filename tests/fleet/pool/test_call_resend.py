"""A container call cut after it left is sent again and runs once (swe_rl/fleet/pool/call_replay.py), on a
real pool, a real exec server and a real container: the client talks to the pool through a loopback proxy
that severs the connection right after forwarding the first exec (what a reset, or a keep-alive connection
closed under load, does), so the client never reads an answer to a command the pool did run."""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest
from agent_fixtures import client_for, leftover_containers

from swe_rl.fleet.call_headers import BOOT_HEADER, CALL_ID_HEADER, CREDENTIAL_HEADER, RESENT_HEADER
from swe_rl.fleet.client import EnvClient, EnvClientConfig

pytestmark = pytest.mark.docker
COUNT = "echo ran >> /tmp/runs && wc -l < /tmp/runs"  # its output is how many times it ran


class SeveringProxy:
    """Forwards loopback TCP to the pool; the first request naming `/exec` is forwarded, then the
    client's connection is closed before any answer (the pool's answer is read and dropped)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.armed = True
        self.severed = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pool_to_client() -> None:
            while data := await up_reader.read(65536):
                if not writer.is_closing():
                    writer.write(data)

        back = asyncio.create_task(pool_to_client())
        try:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
                if self.armed and b"POST /exec " in data:
                    self.armed, self.severed = False, self.severed + 1
                    writer.transport.abort()  # the client reads a reset, never an answer
                    await asyncio.sleep(5)  # the pool's answer arrives on the upstream side and is dropped
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            back.cancel()
            up_writer.close()
            writer.close()


async def test_an_exec_cut_after_it_left_is_sent_again_and_runs_once(
    fleet, pool_factory, docker_client, base_image
):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    proxy = SeveringProxy(pool.port)
    url = await proxy.start()
    try:
        # through the pool: call replay is the pool's (a direct call is resent only when it never left)
        config = EnvClientConfig(pool_url=url, token=pool.token, backoff=0.1, direct=False)
        async with EnvClient(config) as client:
            lease = await client.allocate(base_image)
            try:
                result = await lease.exec(COUNT)  # severed once, sent again with its call id
                assert proxy.severed == 1
                assert result.ok and result.output.strip() == "1"  # the first send's answer: it ran once
                again = await lease.exec("wc -l < /tmp/runs")
                assert again.output.strip() == "1"  # and only once
            finally:
                await lease.close()
    finally:
        await proxy.close()
    assert leftover_containers(docker_client, pool) == []


async def test_a_resend_to_a_pool_that_cannot_know_is_refused_and_not_run(
    fleet, pool_factory, docker_client, base_image
):
    """Straight HTTP: a resent call naming another pool instance (a restart in between) gets a 503 saying
    it may have run, and nothing runs; one naming this instance but unknown to it runs once."""
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    async with client_for(pool) as client:
        lease = await client.allocate(base_image)
        headers = {"Authorization": f"Bearer {pool.token}", CREDENTIAL_HEADER: lease.credential}
        body = {"lease_id": lease.lease_id, "command": COUNT, "timeout": 60}
        try:
            async with httpx.AsyncClient(base_url=pool.url, headers=headers, timeout=120) as http:
                boot = (await http.get("/healthz")).headers[BOOT_HEADER]
                refused = await http.post(
                    "/exec", json=body, headers={CALL_ID_HEADER: secrets.token_hex(8), RESENT_HEADER: "other"}
                )
                assert refused.status_code == 503 and refused.json()["may_have_run"] is True
                call = {CALL_ID_HEADER: secrets.token_hex(8), RESENT_HEADER: boot}
                first = await http.post("/exec", json=body, headers=call)
                second = await http.post("/exec", json=body, headers=call)
                assert first.status_code == 200 and first.json()["output"].strip() == "1"  # never run before
                assert second.json() == first.json()  # the same answer again, not a second run
                other = {CALL_ID_HEADER: call[CALL_ID_HEADER]}
                misused = await http.post(  # the operator's token: past the credential check, to the replay's
                    "/exec", json={**body, "lease_id": "another"}, headers={**other, **pool.operator_headers}
                )
                assert misused.status_code == 400  # one call id, one call
            assert (await lease.exec("wc -l < /tmp/runs")).output.strip() == "1"  # the refused one never ran
        finally:
            await lease.close()
