"""Direct exec and per-lease credentials, over a real pool process and real exec servers (memory backend).

A client calls its lease's node itself with the lease's credential; the pool is off the path, so a pool
killed mid-call interrupts nothing. And the attacks that must fail: another job's client (same client
token, the lease id known, no credential), the lease of one credential used on another lease's
container, a tampered, expired or foreign credential, the client token on a node, a credential on a
node's own endpoints, and the lease list of /status without the operator token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.errors import Forbidden
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet
from swe_rl.fleet.lease_credential import CREDENTIAL_HEADER, LeaseSigner, load_or_create_signing_key
from swe_rl.fleet.pool.credentials import LEASE_OPS
from tests.conftest import free_port

pytestmark = pytest.mark.docker  # starts a (two-node, in-memory) fleet: the fleet tier; no Docker needed

IMAGE = "swe-rl/any:latest"


@pytest.fixture(scope="module")
def fleet() -> Iterator[MemoryFleet]:
    with MemoryFleet(nodes=2, max_per_node=4) as running:
        yield running


def _client(fleet: MemoryFleet, **overrides: Any) -> EnvClient:
    return EnvClient(EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, backoff=0.1, **overrides))


def _pool(
    fleet: MemoryFleet, path: str, body: Any, *, credential: str | None = None, token: str = ""
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or fleet.token}"}
    if credential is not None:
        headers[CREDENTIAL_HEADER] = credential
    return httpx.post(fleet.pool_url + path, json=body, headers=headers, timeout=60)


def _node(url: str, op: str, body: dict[str, Any], authorization: str) -> httpx.Response:
    return httpx.post(
        f"{url}/container/{op}", json=body, headers={"Authorization": authorization}, timeout=60
    )


def _expect(resp: httpx.Response, status: int, words: str) -> None:
    assert resp.status_code == status, resp.text
    assert words in resp.json()["error"], resp.text


async def test_a_direct_exec_goes_to_the_node_and_the_pool_learns_its_use(fleet):
    async with _client(fleet) as client:
        lease = await client.allocate(IMAGE)
        assert lease.node in fleet.exec_urls and lease.credential
        result = await lease.exec("echo direct")
        assert (result.returncode, result.output.strip()) == (0, "direct")
        await lease.write_file("/tmp/f.txt", "kept")
        assert await lease.read_file("/tmp/f.txt") == b"kept"

        def counted() -> dict[str, Any]:
            return httpx.get(lease.node + "/healthz", timeout=30).json()["direct_calls"]

        assert counted().get("exec:ok", 0) >= 1  # the node did the call, the pool never saw it
        # the pool learns it off the call's path: the node's counts reach its /metrics with the health checks
        deadline = time.monotonic() + 60  # a bound on waiting for a health pass, not a speed test
        metrics = ""
        while 'op="exec",outcome="ok"' not in metrics and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            metrics = httpx.get(
                fleet.pool_url + "/metrics", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=30
            ).text
        assert "swe_pool_node_direct_calls{" in metrics and 'op="exec",outcome="ok"' in metrics
        await lease.close()


async def test_routing_through_the_pool_stays_available(fleet):
    async with _client(fleet, direct=False) as client, client.lease(IMAGE) as lease:
        before = httpx.get(lease.node + "/healthz", timeout=30).json()["direct_calls"].get("exec:ok", 0)
        result = await lease.exec("echo routed")
        assert result.output.strip() == "routed"
        after = httpx.get(lease.node + "/healthz", timeout=30).json()["direct_calls"].get("exec:ok", 0)
        assert after == before  # it went through the pool (its bearer token), not as a direct call


async def test_another_jobs_client_cannot_exec_read_or_destroy_a_lease(fleet):
    async with _client(fleet) as owner, _client(fleet) as other, owner.lease(IMAGE) as lease:
        lid = lease.lease_id
        for path, body in (
            ("/exec", {"lease_id": lid, "command": "echo pwned"}),
            ("/read_file", {"lease_id": lid, "path": "/etc/hostname"}),
            ("/diff", {"lease_id": lid}),
            ("/close", {"lease_id": lid}),
            (f"/leases/{lid}/snapshot", {"owner": other.owner}),
            ("/credential", {"lease_id": lid}),
        ):
            _expect(_pool(fleet, path, body), 403, "needs the lease's credential")
        # another lease's credential does not open this one (pool and node alike)
        async with other.lease(IMAGE) as theirs:
            for path, body in (
                ("/exec", {"lease_id": lid, "command": "echo x"}),
                ("/close", {"lease_id": lid}),
            ):
                _expect(_pool(fleet, path, body, credential=theirs.credential), 403, f"not '{lid}'")
            if theirs.node == lease.node:
                body = {"container_id": lease.container_id, "command": "echo x"}
                _expect(
                    _node(lease.node, "exec", body, f"Lease {theirs.credential}"), 403, "another container"
                )
            with pytest.raises(Forbidden):  # the client's own typed error
                await other._call(
                    "exec",
                    {"lease_id": lid, "command": "echo x"},
                    timeout=30,
                    retry=_safe(),
                    credential=theirs.credential,
                )
        # the lease is untouched: its holder goes on
        assert (await lease.exec("echo mine")).output.strip() == "mine"


async def test_a_credential_for_lease_a_on_lease_bs_container_is_refused(fleet):
    async with _client(fleet) as client, client.lease(IMAGE) as a, client.lease(IMAGE) as b:
        body = {"container_id": b.container_id, "command": "echo x"}
        _expect(_node(b.node, "exec", body, f"Lease {a.credential}"), 403, "another container")
        _expect(
            _pool(fleet, "/exec", {"lease_id": b.lease_id, "command": "echo x"}, credential=a.credential),
            403,
            "not",
        )
        assert (await b.exec("echo b")).output.strip() == "b"  # B's own credential still works


async def test_tampered_expired_and_foreign_credentials_are_refused_by_the_node(fleet):
    async with _client(fleet) as client, client.lease(IMAGE) as lease:
        body = {"container_id": lease.container_id, "command": "echo x"}
        version, payload, signature = lease.credential.split(".")
        flipped = signature[:5] + ("A" if signature[5] != "A" else "B") + signature[6:]
        _expect(
            _node(lease.node, "exec", body, f"Lease {version}.{payload}.{flipped}"), 403, "does not verify"
        )
        _expect(
            _node(lease.node, "exec", body, f"Lease {version}.{payload[:-2]}.{signature}"), 403, "forbidden"
        )
        # signed by the pool's own key, but expired
        assert fleet.log_dir is not None
        pool_key = LeaseSigner(load_or_create_signing_key(str(fleet.log_dir / "lease-signing.key")))
        expired, _ = pool_key.issue(lease.lease_id, lease.node, lease.container_id, LEASE_OPS, -1)
        _expect(_node(lease.node, "exec", body, f"Lease {expired}"), 403, "expired")
        _expect(
            _pool(fleet, "/exec", {"lease_id": lease.lease_id, "command": "x"}, credential=expired),
            403,
            "expired",
        )
        # a well-formed credential of a key the node does not trust
        stranger, _ = LeaseSigner(Ed25519PrivateKey.generate()).issue(
            lease.lease_id, lease.node, lease.container_id, LEASE_OPS, 600
        )
        _expect(_node(lease.node, "exec", body, f"Lease {stranger}"), 403, "does not trust")
        # a valid credential on the node's own endpoints, and the client's token on the node
        _expect(
            _node(lease.node, "destroy", {"container_id": lease.container_id}, f"Lease {lease.credential}"),
            403,
            "may not call",
        )
        _expect(_node(lease.node, "exec", body, f"Bearer {fleet.token}"), 401, "unauthorized")
        assert (await lease.exec("echo still")).output.strip() == "still"


async def test_a_credential_the_node_verified_before_is_still_checked_on_every_call(fleet):
    """The node keeps the credentials it verified (no signature check the next time): scope and expiry are
    checked on each call all the same."""
    async with _client(fleet) as client, client.lease(IMAGE) as a, client.lease(IMAGE) as b:
        assert fleet.log_dir is not None
        pool_key = LeaseSigner(load_or_create_signing_key(str(fleet.log_dir / "lease-signing.key")))
        ttl = 3.0
        only_exec, exp = pool_key.issue(a.lease_id, a.node, a.container_id, ("exec",), ttl)
        mine = {"container_id": a.container_id, "command": "echo kept"}
        resp = _node(a.node, "exec", mine, f"Lease {only_exec}")
        assert resp.status_code == 200 and resp.json()["output"].strip() == "kept", resp.text
        _expect(_node(a.node, "read_file", {"container_id": a.container_id, "path": "/x"}, f"Lease {only_exec}"),
                403, "does not allow 'read_file'")  # fmt: skip
        theirs = {"container_id": b.container_id, "command": "echo x"}
        _expect(_node(b.node, "exec", theirs, f"Lease {only_exec}"), 403, "forbidden")
        await asyncio.sleep(max(0.0, exp - time.time()) + 0.5)  # its expiry passes (a wait, not a timing)
        _expect(_node(a.node, "exec", mine, f"Lease {only_exec}"), 403, "expired")
        assert (await a.exec("echo own")).output.strip() == "own"  # the lease's own credential still works


async def test_a_credential_is_renewed_by_its_holder_only(fleet):
    async with _client(fleet) as client, client.lease(IMAGE) as lease:
        resp = _pool(fleet, "/credential", {"lease_id": lease.lease_id}, credential=lease.credential)
        assert resp.status_code == 200, resp.text
        fresh = resp.json()["credential"]
        body = {"container_id": lease.container_id, "command": "echo renewed"}
        assert _node(lease.node, "exec", body, f"Lease {fresh}").json()["output"].strip() == "renewed"


def test_status_lists_leases_to_the_operator_token_only(fleet):
    with httpx.Client(timeout=30) as http:
        lease = _pool(fleet, "/allocate", {"image": IMAGE}).json()
        try:
            client_view = http.get(
                fleet.pool_url + "/status?operator=1", headers={"Authorization": f"Bearer {fleet.token}"}
            ).json()
            assert client_view["leases"] == [] and client_view["totals"]["leases"] >= 1
            assert lease["lease_id"] not in str(client_view)
            operator = http.get(
                fleet.pool_url + "/status", headers={"Authorization": f"Bearer {fleet.operator_token}"}
            ).json()
            assert lease["lease_id"] in {row["lease_id"] for row in operator["leases"]}
        finally:
            assert (
                _pool(
                    fleet, "/close", {"lease_id": lease["lease_id"]}, credential=lease["credential"]
                ).status_code
                == 200
            )


def test_the_operator_token_needs_no_credential(fleet):
    lease = _pool(fleet, "/allocate", {"image": IMAGE}).json()
    resp = _pool(fleet, "/close", {"lease_id": lease["lease_id"]}, token=fleet.operator_token)
    assert resp.status_code == 200 and resp.json()["released"] is True


def _safe():  # the client's retry kind of a call safe to repeat
    from swe_rl.fleet.retry import Retry

    return Retry.SAFE


def test_a_direct_exec_completes_while_the_pool_is_killed():
    """SIGKILL of the pool process mid-exec: the exec is between the client and the node, it completes."""
    with MemoryFleet(nodes=1, max_per_node=2, latency_ms="0,4000,0") as fleet:

        async def run() -> tuple[Any, bool]:
            async with _client(fleet) as client:
                lease = await client.allocate(IMAGE)
                call = asyncio.create_task(lease.exec("echo survived", timeout=120))
                deadline = time.monotonic() + 60  # a bound on the call reaching the node, not a speed test
                while time.monotonic() < deadline and not call.done():
                    health = await asyncio.to_thread(
                        lambda: httpx.get(lease.node + "/healthz", timeout=30).json()
                    )
                    if health["calls_in_flight"] >= 1:
                        break
                    await asyncio.sleep(0.05)
                assert not call.done(), "the exec finished before the pool could be killed"
                fleet.kill_pool()  # kill -9: nothing of the pool's shutdown runs
                assert fleet.pool is not None
                killed = fleet.pool.poll() is not None
                return await call, killed

        result, killed = asyncio.run(run())
        assert killed
        assert (result.returncode, result.output.strip()) == (0, "survived")
        fleet.start_pool()  # back, so the fleet stops cleanly (it releases the lease)


def test_direct_calls_keep_a_lease_alive_without_the_pool_on_their_path():
    """The pool learns a lease's direct use from its periodic touch of the node (`report_used`), so a
    lease used only directly (no heartbeat) outlives the lease TTL; one nobody uses is reclaimed."""
    with MemoryFleet(
        nodes=1, max_per_node=4, pool_env={"SWE_POOL_LEASE_TTL": "3", "SWE_POOL_REAP_INTERVAL": "0.5"}
    ) as fleet:

        async def run() -> None:
            async with _client(fleet) as client:
                used = await client.allocate(IMAGE)  # no heartbeat: `allocate`, not `lease`
                idle = await client.allocate(IMAGE)
                until = time.monotonic() + 9  # three TTLs of direct calls only
                while time.monotonic() < until:
                    assert (await used.exec("echo alive")).output.strip() == "alive"
                    await asyncio.sleep(0.3)
                beat = _pool(fleet, "/heartbeat", {"lease_ids": [used.lease_id, idle.lease_id]}).json()
                assert beat["unknown"] == [idle.lease_id]  # the idle one was reclaimed, the used one lives
                await used.close()

        asyncio.run(run())


async def test_a_node_the_worker_cannot_reach_is_called_through_the_pool(fleet):
    """A direct call that never reached the node (here: an address nobody listens on, as a node on a network
    the worker does not see) runs through the pool instead, once: nothing had run."""
    async with _client(fleet) as client, client.lease(IMAGE) as lease:
        lease.node = f"http://127.0.0.1:{free_port()}"
        result = await lease.exec("echo via-pool")
        assert (result.returncode, result.output.strip()) == (0, "via-pool")
