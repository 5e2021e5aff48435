"""The pool the tests share (`agent_fixtures.SharedPool`): a test gets it only as the last one found it."""

from __future__ import annotations

import pytest
from agent_fixtures import SharedPool, client_for

from tests.conftest import BASE_IMAGE

pytestmark = pytest.mark.docker


async def test_a_left_container_or_a_dead_server_gets_the_next_test_a_fresh_pair(
    docker_client, base_image, internal_network, tmp_path
):
    shared = SharedPool(tmp_path, internal_network)
    try:
        first = shared.ready()
        shared.after_test(docker_client)
        assert shared.ready() is first  # nothing left behind: the same pair serves the next test

        async with client_for(first) as client:
            await client.allocate(BASE_IMAGE)  # never closed: its container stays
        shared.after_test(docker_client)  # waits as `leftover_containers` does, then gives up the pair
        assert first.proc is not None and first.proc.poll() is not None
        assert not docker_client.containers.list(all=True, filters={"label": f"swe-rl.owner={first.pool_id}"})

        second = shared.ready()
        assert second.pool_id != first.pool_id
        shared.servers[0].kill()  # a node died under a test
        third = shared.ready()
        assert third.pool_id != second.pool_id and second.proc is not None and second.proc.poll() is not None
        async with client_for(third) as client, client.lease(BASE_IMAGE) as lease:
            assert (await lease.exec("echo ok", timeout=60)).output.strip() == "ok"
        shared.after_test(docker_client)
        assert shared.ready() is third
    finally:
        shared.stop()
