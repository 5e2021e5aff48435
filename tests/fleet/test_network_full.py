"""An allocate on a Docker network with no free address fails at once with that reason.

Before, Docker's "no available IPv4 addresses" at container start was a node failure (502), the pool
answered 503 and the client retried it until the allocate deadline (600 s), then env_error with a
generic message. A real exec server and pool, a real /30 network (one address for containers)."""

from __future__ import annotations

import asyncio
import random

import pytest

from swe_rl.fleet.client import EnvClient
from swe_rl.fleet.client_config import EnvClientConfig
from swe_rl.fleet.errors import NetworkFull
from tests.conftest import TEST_ID_PREFIX, remove_test_network
from tests.pool_fixtures import wait_for


@pytest.fixture
def tiny_network(docker_client):
    """A /30 network (one address left for containers), removed afterwards whatever happened."""
    import docker.errors
    import docker.types

    name = f"{TEST_ID_PREFIX}netfull"
    for _ in range(20):  # a free /30 somewhere in 10.240.0.0/12 (another network may hold one)
        subnet = f"10.{random.randint(240, 255)}.{random.randint(0, 255)}.{4 * random.randint(0, 63)}/30"
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        try:
            net = docker_client.networks.create(name, driver="bridge", internal=True, ipam=ipam)
            break
        except docker.errors.APIError as exc:
            if "overlap" not in str(exc):
                raise
    else:
        pytest.fail("no free /30 subnet found")
    yield name
    remove_test_network(net)


async def test_allocate_on_a_full_network_fails_at_once(
    fleet, pool_factory, base_image, tiny_network, docker_client
):
    pool = pool_factory(fleet(1, SWE_EXEC_NETWORKS=tiny_network))
    config = EnvClientConfig(pool_url=pool.url, token=pool.token, allocate_deadline=600.0, backoff=0.05)
    async with EnvClient(config) as client:
        first = await client.allocate(base_image, network=tiny_network)  # takes the network's one address
        try:
            # a bound that only rules out the old retries until the 600 s deadline
            second = client.allocate(base_image, network=tiny_network)
            with pytest.raises(NetworkFull, match=f"no free address on network '{tiny_network}'") as info:
                await asyncio.wait_for(second, timeout=300)
            assert "no available IPv4 addresses" in str(info.value) and info.value.status == 507
            assert pool.status()["totals"]["leases"] == 1  # nothing half-created was leased
        finally:
            await first.close()
        # once the container is gone (removed after the close), the address is free: the next one starts
        await wait_for(lambda: not network_containers(docker_client, tiny_network), "the removal", 120)
        again = await client.allocate(base_image, network=tiny_network)
        await again.close()


def network_containers(docker_client, name: str) -> list[str]:
    """The ids of the containers attached to the network, as the network itself lists them (not inspected
    one by one: a container removed between the listing and its inspection was a 404 here)."""
    net = docker_client.networks.get(name)
    net.reload()
    return list(net.attrs.get("Containers") or {})
