"""One heartbeat request for all of a client's leases: the pool's `lease_ids` form and the client's loop.

Over a simulated fleet (real pool and exec server subprocesses on loopback, the in-memory backend).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.fakes.simulated_fleet import MemoryFleet

pytestmark = pytest.mark.docker  # starts a fleet (no daemon needed): the fleet tier


@pytest.fixture(scope="module")
def fleet():
    with MemoryFleet(nodes=2, max_per_node=20, pool_env={"SWE_POOL_LEASE_TTL": "600"}) as f:
        yield f


def post(fleet: MemoryFleet, path: str, body: object) -> httpx.Response:
    return httpx.post(
        fleet.pool_url + path, json=body, headers={"Authorization": f"Bearer {fleet.token}"}, timeout=30
    )


def client_of(fleet: MemoryFleet, **overrides: object) -> EnvClient:
    return EnvClient(EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, backoff=0.1, **overrides))


def test_batch_heartbeat_extends_known_leases_and_names_the_others(fleet):
    async def run() -> None:
        async with client_of(fleet) as client:
            a, b = await client.allocate("img:a"), await client.allocate("img:b")
            await b.close()
            resp = post(fleet, "/heartbeat", {"lease_ids": [a.lease_id, b.lease_id, "nope"]})
            assert resp.status_code == 200, resp.text
            data = resp.json()
            assert data["ok"] and data["expires_at"] > time.time() + 500
            assert sorted(data["unknown"]) == sorted([b.lease_id, "nope"])
            assert data["lost"] == {} and data["node_down"] == []
            await a.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    "body, message",
    [
        ({"lease_ids": "abc"}, "lease_ids must be a list of non-empty strings"),
        ({"lease_ids": [1, 2]}, "lease_ids must be a list of non-empty strings"),
        ({"lease_ids": [""]}, "lease_ids must be a list of non-empty strings"),
        ({"lease_ids": ["x"] * 10_001}, "at most 10000 per request"),
    ],
)
def test_batch_heartbeat_refuses_bad_lists(fleet, body, message):
    resp = post(fleet, "/heartbeat", body)
    assert resp.status_code == 400 and message in resp.json()["error"]


def test_client_heartbeats_all_its_leases_in_one_request(fleet):
    def heartbeat_calls() -> float:
        text = httpx.get(
            fleet.pool_url + "/metrics", headers={"Authorization": f"Bearer {fleet.token}"}, timeout=30
        ).text
        lines = [line for line in text.splitlines() if line.startswith('swe_pool_calls_total{op="heartbeat"')]
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    async def run() -> None:
        async with client_of(fleet, heartbeat_interval=0.5) as client:
            leases = [await client.allocate(f"img:{i}") for i in range(6)]
            for lease in leases:
                lease.start_heartbeat()
            first = [lease.expires_at for lease in leases]
            before = heartbeat_calls()
            await asyncio.sleep(1.3)  # two beats
            beats = heartbeat_calls() - before
            assert 1 <= beats <= 3, beats  # one request per beat for all six, not six
            assert all(lease.expires_at > t for lease, t in zip(leases, first))

            # a lease the pool forgot (closed behind the client's back) is marked lost, the others go on
            closed = httpx.post(
                fleet.pool_url + "/close",
                json={"lease_id": leases[0].lease_id},
                headers={"Authorization": f"Bearer {fleet.operator_token}"},  # behind the client's back
                timeout=30,
            )
            assert closed.status_code == 200
            await client.heartbeat_all()
            assert leases[0].lost is not None and "unknown or expired lease" in str(leases[0].lost)
            assert all(lease.lost is None for lease in leases[1:])
            assert await client.heartbeat_all() == 5
            for lease in leases:
                await lease.close()
            assert await client.heartbeat_all() == 0

    asyncio.run(run())


def test_status_pages_its_leases_and_refuses_a_bad_page(fleet):
    """GET /status gives every node and one page of the leases (`offset`, `limit`); the pages cover every
    lease once; a bad page is a clear 400."""

    def status(query: str) -> httpx.Response:
        return httpx.get(
            fleet.pool_url + "/status" + query,
            headers={"Authorization": f"Bearer {fleet.operator_token}"},  # the leases: the operator's view
            timeout=30,
        )

    async def run() -> None:
        async with client_of(fleet) as client:
            leases = [await client.allocate(f"img:{i}") for i in range(5)]
            try:
                seen: list[str] = []
                query = "?limit=2"
                while True:
                    page = status(query).json()
                    assert page["totals"]["leases"] == 5 and len(page["nodes"]) == 2
                    assert len(page["leases"]) <= 2
                    seen += [lease["lease_id"] for lease in page["leases"]]
                    if page["leases_page"]["next"] is None:
                        break
                    query = f"?limit=2&offset={page['leases_page']['next']}"
                assert seen == [lease.lease_id for lease in leases]
                for bad in ("?limit=0", "?limit=x", "?offset=-1", "?limit=100000"):
                    answer = status(bad)
                    assert answer.status_code == 400 and "must be a whole number" in answer.json()["error"]
            finally:
                for lease in leases:
                    await lease.close()

    asyncio.run(run())
