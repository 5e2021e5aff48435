"""Named Docker networks for grading and episodes (SWE_EXEC_NETWORKS allowlist).

Fixture pytoolz__toolz-9004's F2P test needs a network *trait*: a connect to a non-routable
address must hang until its timeout (an internal no-egress network gives that); with no
network at all it fails at once, so even the gold patch is unresolved there.
"""

from __future__ import annotations

import json
import secrets

import pytest
from agent_fixtures import FIXTURES_JSONL as ROWS_FILE
from agent_fixtures import client_for

from swe_rl.agent import run_instance
from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader, GraderConfig
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies.gold import GoldPolicy
from swe_rl.tasks.networks import network_for, parse_network

NET = "pytoolz__toolz-9004"
IDS = [json.loads(line)["instance_id"] for line in ROWS_FILE.read_text().splitlines() if line.strip()]
MISSING = f"swe-rl-i14-missing-{secrets.token_hex(3)}"


@pytest.fixture
def net_pool(fleet, pool_factory, internal_network):
    """A pool over one exec server that allows the session's internal network and one that does not exist."""
    return pool_factory(fleet(1, SWE_EXEC_NETWORKS=f"{internal_network}, {MISSING}"))


@pytest.fixture
async def net_client(net_pool):
    async with client_for(net_pool, allocate_deadline=20) as c:
        yield c


def with_row_network(inst, network):
    return inst.model_copy(update={"extra": {**inst.extra, "network": network}})


async def test_gold_needs_the_network_trait(net_client, fixture_instances, internal_network):
    inst = fixture_instances[NET]
    isolated = await FleetGrader(net_client, GraderConfig(network=False)).grade(inst, inst.patch)
    assert isolated.status is GradeStatus.UNRESOLVED and isolated.network is False
    assert isolated.fail_to_pass.failure == inst.fail_to_pass
    networked = await FleetGrader(net_client, GraderConfig(network=internal_network)).grade(inst, inst.patch)
    assert networked.status is GradeStatus.RESOLVED, networked.message
    assert networked.network == internal_network


async def test_the_instance_row_names_its_network(net_client, fixture_instances, internal_network):
    inst = with_row_network(fixture_instances[NET], internal_network)
    grade = await FleetGrader(net_client).grade(inst, inst.patch)  # no run-level choice: the row's
    assert grade.status is GradeStatus.RESOLVED and grade.network == internal_network
    # a run-level choice wins over the row
    forced = await FleetGrader(net_client, GraderConfig(network="none")).grade(inst, inst.patch)
    assert forced.status is GradeStatus.UNRESOLVED and forced.network is False


async def test_agent_episode_on_the_named_network(net_client, fixture_instances, internal_network):
    inst = fixture_instances[NET]
    from swe_rl.agent import AgentConfig

    config = AgentConfig(env_options={"network": internal_network})
    grader = FleetGrader(net_client, GraderConfig(network=internal_network))
    result = await run_instance(
        inst, GoldPolicy(), BashBlockHarness(), client=net_client, config=config, grader=grader
    )
    assert result.status is GradeStatus.RESOLVED, result.grade.message


async def test_a_missing_network_is_env_error_never_unresolved(net_client, fixture_instances):
    inst = fixture_instances[NET]
    grade = await FleetGrader(net_client, GraderConfig(network=MISSING)).grade(inst, inst.patch)
    assert grade.status is GradeStatus.ENV_ERROR and grade.infra_failure
    assert MISSING in grade.message and "not found" in grade.message


async def test_a_network_not_in_the_allowlist_is_env_error(net_client, fixture_instances):
    # the fixture row names swe-rl-internal, which this node does not allow
    inst = with_row_network(fixture_instances[NET], "swe-rl-internal")
    grade = await FleetGrader(net_client).grade(inst, inst.patch)
    assert grade.status is GradeStatus.ENV_ERROR
    assert "not allowed" in grade.message and "SWE_EXEC_NETWORKS" in grade.message


@pytest.mark.parametrize(
    "value, status",
    [("host", 400), ("bad name!", 400), (7, 400), ("bridge", 200), ("none", 200), (False, 200)],
)
def test_exec_server_validates_the_network(exec_server_factory, base_image, value, status):
    srv = exec_server_factory()
    resp = srv.post("/container/create", json={"image": base_image, "workdir": "/", "network": value})
    assert resp.status_code == status, resp.text
    if status == 200:
        srv.post("/container/destroy", json={"container_id": resp.json()["container_id"]})
    else:
        assert "network" in resp.json()["error"]


def test_parse_network_and_precedence(fixture_instances, internal_network):
    assert parse_network(None) is None and parse_network("") is None
    assert parse_network("none") is False and parse_network("default") is True and parse_network(True) is True
    assert parse_network("swe-rl-internal") == "swe-rl-internal"
    with pytest.raises(ValueError):
        parse_network(3)
    plain, net = fixture_instances["pytoolz__toolz-9001"], fixture_instances[NET]
    assert network_for(plain) is False and network_for(net) == internal_network  # (the session's stand-in)
    assert json.loads(ROWS_FILE.read_text().splitlines()[IDS.index(NET)])["network"] == "swe-rl-internal"
    assert network_for(net, "none") is False and network_for(plain, "other") == "other"
