"""The local fleet (swe_rl/fleet/local.py): the named networks it makes and allows, and what it
says when the server extra is missing."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from swe_rl.fleet import local
from swe_rl.fleet.local import LocalFleet
from swe_rl.fleet.local_networks import LABEL_CREATOR, allowed_networks, users_dir
from tests.conftest import TEST_ID_PREFIX


def wait_for(read, timeout: float = 60.0):
    """What `read` answers once it answers something (the pool hands its key over at a health check)."""
    deadline = time.monotonic() + timeout
    while not (value := read()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def network_exists(docker_client, name: str) -> bool:
    return bool(docker_client.networks.list(names=[name]))


def create_on(fleet: LocalFleet, image: str, network: str) -> httpx.Response:
    """A container on `network`, asked of the fleet's exec server directly (destroyed at once)."""
    headers = {"Authorization": f"Bearer {fleet.exec_token}"}  # the node's token (the pool's, not a client's)
    r = httpx.post(
        fleet.exec_urls[0] + "/container/create",
        json={"image": image, "network": network},
        headers=headers,
        timeout=120,
    )
    if r.status_code == 200:
        httpx.post(
            fleet.exec_urls[0] + "/container/destroy",
            json={"container_id": r.json()["container_id"]},
            headers=headers,
            timeout=60,
        ).raise_for_status()
    return r


@pytest.mark.docker
def test_a_missing_network_is_made_internal_allowed_and_removed_after(docker_client, base_image):
    name = f"{TEST_ID_PREFIX}net-made"
    assert not network_exists(docker_client, name)
    try:
        with LocalFleet(exec_servers=1, max_containers_per_node=2, networks=[name]) as fleet:
            net = docker_client.networks.get(name)
            assert net.attrs["Internal"] is True
            assert net.attrs["Labels"][LABEL_CREATOR]
            r = create_on(fleet, base_image, name)
            assert r.status_code == 200, r.text
            other = create_on(fleet, base_image, f"{TEST_ID_PREFIX}not-asked-for")
            assert other.status_code == 403, other.text  # only the named ones are allowed
        assert not network_exists(docker_client, name)
    finally:
        for net in docker_client.networks.list(names=[name]):
            net.remove()


@pytest.mark.docker
def test_a_network_two_fleets_share_is_removed_by_the_last_to_stop(docker_client, base_image):
    """The defect a side-by-side pair of test runs found: the fleet that made the network removed it at
    its stop while another fleet still used it (between two episodes: no container on it), whose next
    allocate then failed with "network not found"."""
    name = f"{TEST_ID_PREFIX}net-shared"
    try:
        first = LocalFleet(exec_servers=1, max_containers_per_node=2, networks=[name])
        with first:
            with LocalFleet(exec_servers=1, max_containers_per_node=2, networks=[name]) as second:
                assert docker_client.networks.get(name).attrs["Labels"][LABEL_CREATOR]  # the first made it
                first.stop()  # the maker stops first, the other goes on
                assert network_exists(docker_client, name)
                r = create_on(second, base_image, name)
                assert r.status_code == 200, r.text
            assert not network_exists(docker_client, name)  # the last one removed it
        assert not (users_dir() / f"{name}.users").exists()  # and its users file
    finally:
        for net in docker_client.networks.list(names=[name]):
            net.remove()


@pytest.mark.docker
def test_a_network_that_was_there_is_used_and_kept(docker_client, base_image):
    name = f"{TEST_ID_PREFIX}net-kept"
    net = docker_client.networks.create(name, driver="bridge", internal=True, labels={"swe-rl.test": "1"})
    try:
        with LocalFleet(exec_servers=1, max_containers_per_node=2, networks=[name]) as fleet:
            r = create_on(fleet, base_image, name)
            assert r.status_code == 200, r.text
        assert network_exists(docker_client, name)
    finally:
        net.remove()


@pytest.mark.docker
def test_a_network_a_killed_fleet_left_is_adopted_and_removed(docker_client):
    name = f"{TEST_ID_PREFIX}net-left"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    docker_client.networks.create(
        name, driver="bridge", internal=True, check_duplicate=True, labels={LABEL_CREATOR: str(dead.pid)}
    )
    try:
        with LocalFleet(exec_servers=1, max_containers_per_node=2, networks=[name]):
            assert network_exists(docker_client, name)
        assert not network_exists(docker_client, name)
    finally:
        for net in docker_client.networks.list(names=[name]):
            net.remove()


def test_allowed_networks_merges_in_order_once():
    assert allowed_networks("a, b", None, ["b", "c"], "") == "a,b,c"


def test_a_missing_server_module_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(local, "SERVER_MODULES", ("flask", "swe_rl_no_such_module_xyz"))
    with pytest.raises(RuntimeError, match=r"swe-rl\[server\].*") as err:
        LocalFleet(log_dir=tmp_path).start()
    assert (
        "swe_rl_no_such_module_xyz" in str(err.value) and "flask" not in str(err.value).split("missing:")[1]
    )
    assert not list(tmp_path.iterdir())  # nothing started


@pytest.mark.slow  # starts a server process
def test_a_server_that_dies_at_start_shows_its_log(tmp_path):
    fleet = LocalFleet(exec_servers=1, log_dir=tmp_path, exec_env={"SWE_EXEC_MAX_CONTAINERS": "not-a-number"})
    with pytest.raises(RuntimeError, match="exited with code") as err:
        with fleet:
            pass
    assert "last lines of" in str(err.value)


@pytest.mark.docker
def test_each_exec_server_keeps_its_state_in_the_fleets_own_directory(tmp_path, monkeypatch):
    """A local fleet's nodes trust its pool's key in a state directory of their own: in the machine's
    default one, every local fleet's new pool key piled up for good (2,038 of them, each tried against
    every new credential and listed in every /healthz)."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))  # where the default state directory would be
    with LocalFleet(exec_servers=2, max_containers_per_node=1, log_dir=tmp_path / "fleet") as fleet:
        for i, url in enumerate(fleet.exec_urls):
            keys = wait_for(lambda url=url: httpx.get(url + "/healthz", timeout=30).json().get("lease_keys"))
            saved = tmp_path / "fleet" / f"exec-state-{i}" / "lease-keys.json"
            assert json.loads(saved.read_text()) == keys and len(keys) == 1
    assert not (home / ".cache" / "swe-rl" / "exec-state").exists()
