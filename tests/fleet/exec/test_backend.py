"""The node backend seam (`swe_rl/fleet/exec/backend.py`): backends chosen by name, a new one is one file plus
one map entry, the memory backend serves the real HTTP API through the normal entry point, and Docker's errors
arrive as the backend's own."""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import waitress.server

from swe_rl.fleet.exec import backend as b
from swe_rl.fleet.exec.app import create_app
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.manager import ContainerManager
from swe_rl.fleet.exec.memory_backend import MemoryBackend
from tests.conftest import BASE_IMAGE, ROOT, free_port, wait_http

PROTOCOL_MEMBERS = sorted(
    {n for n in vars(b.NodeBackend) if not n.startswith("_")} | set(b.NodeBackend.__annotations__)
)


@dataclass
class Node:
    url: str
    token: str

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            self.url + path, json=body, headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        )

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.post(path, body)
        assert r.status_code == 200, r.text
        return r.json()


def lease_round_trip(node: Node, image: str, create_dirs: bool = True) -> str:
    """Create, exec, write + read a file, destroy, through the HTTP API; the command's output."""
    folder = "notes/" if create_dirs else ""
    cid = node.call("/container/create", {"image": image, "lease_id": "lease-1", "owner": "h-backend"})[
        "container_id"
    ]
    out = node.call("/container/exec", {"container_id": cid, "command": "echo hi"})
    assert out["returncode"] == 0 and out["timed_out"] is False
    node.call(
        "/container/write_file",
        {"container_id": cid, "path": f"{folder}a.txt", "content": "x\n", "create_dirs": create_dirs},
    )
    read = node.call("/container/read_file", {"container_id": cid, "path": f"{folder}a.txt"})
    assert read["content"] == "x\n" and read["size"] == 2
    assert (
        node.post("/container/read_file", {"container_id": cid, "path": f"{folder}missing"}).status_code
        == 404
    )
    assert node.call("/container/destroy", {"container_id": cid})["ok"] is True
    assert node.post("/container/exec", {"container_id": cid, "command": "true"}).status_code == 404
    return out["output"]


def test_every_backend_of_the_map_offers_the_whole_protocol():
    assert {"docker", "memory"} <= set(b.BACKENDS)
    assert "create_container" in PROTOCOL_MEMBERS and "name" in PROTOCOL_MEMBERS
    for name in b.BACKENDS:
        cls = b.backend_class(name)
        missing = [m for m in PROTOCOL_MEMBERS if not hasattr(cls, m)]
        assert not missing, (name, missing)
        assert cls.name == name and callable(cls.from_config)


def test_an_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match="docker, memory"):
        b.backend_class("kubernetes")
    assert ExecConfig.from_env({}).backend == "docker"


@pytest.fixture
def directory_node(monkeypatch, tmp_path) -> Iterator[tuple[Node, ContainerManager]]:
    """The normal exec app over a backend registered by one map entry (tests/fleet/exec/directory_backend.py)."""
    monkeypatch.setitem(b.BACKENDS, "directory", "tests.fleet.exec.directory_backend:DirectoryBackend")
    cfg = ExecConfig(
        token=secrets.token_hex(8), backend="directory", max_warm=0, state_dir=str(tmp_path / "state")
    )
    cfg.server_id, cfg.networks = f"h-backend-{secrets.token_hex(3)}", ("h-backend-none",)
    manager = ContainerManager(cfg)
    server = waitress.server.create_server(create_app(manager), host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield Node(f"http://127.0.0.1:{server.effective_port}", cfg.token), manager
    finally:
        server.close()
        thread.join(30)
        manager.stop()
        manager.backend.close()


def test_a_new_backend_is_one_file_plus_one_map_entry(directory_node):
    node, manager = directory_node
    assert type(manager.backend).__name__ == "DirectoryBackend"
    health = httpx.get(node.url + "/healthz", timeout=30).json()
    assert health["ok"] and health["backend"] == "directory"
    assert lease_round_trip(node, "any/image:1", create_dirs=False) == "hi\n"
    # the backend really ran the command: a file written by a command is read back through the API
    cid = node.call("/container/create", {"image": "any/image:1"})["container_id"]
    node.call("/container/exec", {"container_id": cid, "command": "printf made > by_cmd.txt"})
    assert node.call("/container/read_file", {"container_id": cid, "path": "by_cmd.txt"})["content"] == "made"
    # the backend's errors become the API's: a refused command 400, a network it lacks 404, a stopped container 409
    assert node.post("/container/exec", {"container_id": cid, "command": "ls /"}).status_code == 400
    r = node.post("/container/create", {"image": "any/image:1", "network": "h-backend-none"})
    assert r.status_code == 404 and r.json()["network_missing"] is True
    manager.backend.stop_container(cid)
    assert node.post("/container/exec", {"container_id": cid, "command": "true"}).status_code == 409
    # what a restarted server finds: its containers, by label
    assert [c.id for c in manager.containers.list_own()] == [cid]
    node.call("/container/destroy", {"container_id": cid})
    assert manager.containers.list_own() == []


def test_the_memory_backend_serves_the_http_api_through_the_normal_entry_point(tmp_path):
    port, token = free_port(), secrets.token_hex(8)
    env = {
        **os.environ,
        "SWE_EXEC_BACKEND": "memory",
        "SWE_EXEC_TOKEN": token,
        "SWE_EXEC_PORT": str(port),
        "SWE_EXEC_SERVER_ID": f"h-backend-{secrets.token_hex(3)}",
        "SWE_EXEC_STATE_DIR": str(tmp_path / "state"),
        "SWE_EXEC_MAX_WARM": "0",
    }
    log = tmp_path / "exec.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "swe_rl.fleet.exec.app"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", proc=proc)
        health = httpx.get(url + "/healthz", timeout=30).json()
        assert health["ok"] and health["backend"] == "memory"
        node = Node(url, token)
        assert lease_round_trip(node, "any/image:1") == "hi\n"
        assert (
            httpx.get(url + "/images", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code
            == 200
        )
    finally:
        proc.terminate()
        proc.wait(30)
    assert "NO CONTAINERS" in log.read_text()


def test_an_unknown_backend_stops_the_normal_entry_point_with_the_names():
    env = {**os.environ, "SWE_EXEC_TOKEN": "t", "SWE_EXEC_PORT": "1", "SWE_EXEC_BACKEND": "h-backend-nope"}
    p = subprocess.run(
        [sys.executable, "-m", "swe_rl.fleet.exec.app"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0 and "SWE_EXEC_BACKEND" in p.stderr and "docker, memory" in p.stderr


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_the_memory_backend_keeps_files_images_and_labels():
    mem = MemoryBackend(images=["a:1"])
    with pytest.raises(b.ImageMissing):
        mem.create_container(b.ContainerSpec("b:1", "x", ("sleep",), {}, "/"))
    c = mem.create_container(b.ContainerSpec("a:1", "x", ("sleep",), {"k": "v"}, "/w"))
    with pytest.raises(b.Conflict):  # created, not started
        mem.exec_run(c.id, "echo a", timeout=5, workdir=None, env=None, max_output=100)
    mem.start_container(c.id)
    assert mem.exec_run(c.id, "echo a", timeout=5, workdir=None, env=None, max_output=100).output == b"a\n"
    assert [x.id for x in mem.list_containers({"k": "v"})] == [c.id] and mem.list_containers({"k": "w"}) == []
    mem.put_archive(c.id, "/", _tar({"tmp/x": b"outside"}))
    snap = mem.commit_container(c.id, "snap", "1", {"swe-rl.snapshot": "s1"})
    assert mem.image_info("snap:1") == snap and "snap:1" in {t for i in mem.list_images() for t in i.tags}
    assert snap.labels == {"swe-rl.snapshot": "s1"} and snap.size == len(b"outside")
    # a container of the committed image starts with the committed files (container snapshots)
    copy = mem.create_container(b.ContainerSpec("snap:1", "y", ("sleep",), {}, "/w"))
    assert mem.get_archive(copy.id, "/tmp/x")[0].size == len(b"outside")
    mem.remove_container(copy.id)
    mem.remove_image("snap:1")
    with pytest.raises(b.NotFound):
        mem.image_info("snap:1")
    mem.remove_container(c.id)
    with pytest.raises(b.NotFound):
        mem.remove_container(c.id)


@pytest.mark.parametrize(
    "status,reason",
    [
        (500, "Container 3460cbc0150e is not running: Removal In Progress"),  # seen on exec start (CI)
        (409, "Container 3460cbc0150e is not running"),
        (500, "container 3460cbc0150e is marked for removal and cannot be started"),
    ],
)
def test_a_container_that_cannot_run_now_is_a_conflict_whatever_the_status(status, reason):
    """A container being removed is the lease's end, not the node failing: a 5xx here would be retried and
    then reported as the fleet being unavailable (it was, in CI, for an exec right after a release)."""
    import docker.errors
    import requests

    from swe_rl.fleet.exec.docker_backend import _errors

    response = requests.Response()
    response.status_code = status
    with pytest.raises(b.Conflict, match="running|removal"), _errors():
        raise docker.errors.APIError(reason, response=response, explanation=reason)
    response.status_code = 500
    with pytest.raises(b.BackendError) as other, _errors():
        raise docker.errors.APIError("x", response=response, explanation="driver failed")
    assert not isinstance(other.value, b.Conflict)


def test_docker_errors_arrive_as_backend_errors(docker_client, base_image):
    from swe_rl.fleet.exec.docker_backend import DockerBackend

    dk = DockerBackend(docker_client)
    assert dk.health() and b.image_present(dk, BASE_IMAGE)
    assert dk.image_info(BASE_IMAGE).size > 0
    with pytest.raises(b.ImageMissing):
        dk.image_info("h-backend-missing:0")
    with pytest.raises(b.NotFound):
        dk.remove_container("h-backend-no-such-container")
    label = {"h-backend.test": secrets.token_hex(4)}
    c = dk.create_container(
        b.ContainerSpec(BASE_IMAGE, f"h-backend-{secrets.token_hex(4)}", ("sleep", "60"), label, "/")
    )
    try:
        assert [x.id for x in dk.list_containers(label)] == [c.id]
        assert dk.list_containers(label)[0].status == "created"
        with pytest.raises(b.Conflict):  # not running
            dk.exec_run(c.id, "true", timeout=10, workdir=None, env=None, max_output=100)
        with pytest.raises(b.Refused):  # a workdir through a file is the request's fault
            dk.start_container(
                dk.create_container(
                    b.ContainerSpec(
                        BASE_IMAGE, f"h-backend-{secrets.token_hex(4)}", ("true",), label, "/etc/passwd/x"
                    )
                ).id
            )
    finally:
        for x in dk.list_containers(label):
            dk.remove_container(x.id)
    assert dk.list_containers(label) == []


def test_merged_output_keeps_the_order_the_command_wrote_in(docker_client, base_image):
    """stdout and stderr joined in the container: a line of one never lands inside a line of the other
    (Docker copies two pipes separately; under load cargo's stderr was spliced into libtest's lines)."""
    from swe_rl.fleet.exec.docker_backend import DockerBackend

    dk = DockerBackend(docker_client)
    label = {"h-backend.test": secrets.token_hex(4)}
    c = dk.create_container(
        b.ContainerSpec(BASE_IMAGE, f"h-backend-{secrets.token_hex(4)}", ("sleep", "300"), label, "/")
    )
    try:
        dk.start_container(c.id)
        script = 'for i in $(seq 300); do printf "test t$i ... "; echo "Running $i" >&2; echo ok; done'
        merged = dk.exec_run(c.id, script, timeout=120, workdir=None, env=None, max_output=1 << 20)
        want = "".join(f"test t{i} ... Running {i}\nok\n" for i in range(1, 301))
        assert merged.returncode == 0 and merged.output.decode() == want
        apart = dk.exec_run(
            c.id, script, timeout=120, workdir=None, env=None, max_output=1 << 20, merge_stderr=False
        )
        assert apart.output.decode() == "".join(f"test t{i} ... ok\n" for i in range(1, 301))
        assert apart.stderr.decode() == "".join(f"Running {i}\n" for i in range(1, 301))
    finally:
        for x in dk.list_containers(label):
            dk.remove_container(x.id)


def test_listing_images_survives_an_image_removed_meanwhile(docker_client, base_image):
    """An image gone between the daemon's listing and its inspection is left out, not an error (it
    stopped a node from starting while a test beside it removed a snapshot image)."""
    from swe_rl.fleet.exec.docker_backend import DockerBackend, DockerImages

    tag = f"h-backend-gone:{secrets.token_hex(4)}"
    docker_client.api.tag(BASE_IMAGE, *tag.split(":"))
    gone = docker_client.containers.create(BASE_IMAGE, ["true"], labels={"h-backend.test": "1"})
    try:
        committed = gone.commit(*tag.split(":"))
    finally:
        gone.remove(force=True)
    listing = docker_client.api.images()
    docker_client.images.remove(tag)

    class StaleListing:
        def __init__(self, api: Any) -> None:
            self._api = api

        def images(self) -> list[dict[str, Any]]:
            return listing  # what the daemon said before the image was removed

        def __getattr__(self, name: str) -> Any:
            return getattr(self._api, name)

    class Client:
        api = StaleListing(docker_client.api)

    assert committed.id in {s["Id"] for s in listing}
    engine_ids = {i.id for i in DockerImages(Client()).list_images()}
    assert committed.id not in engine_ids and engine_ids
    backend = DockerBackend(docker_client)
    backend.client = Client()  # type: ignore[assignment]
    infos = backend.list_images()
    assert {i.id for i in infos} == {s["Id"] for s in listing}
    assert any(BASE_IMAGE in i.tags for i in infos)


def test_images_in_use_survives_a_container_whose_image_is_gone(docker_client, base_image):
    """A stopped container whose image was force-removed still names its image id; the listing does not
    inspect the image (that 404 stopped a node from starting beside a leftover container)."""
    from swe_rl.fleet.exec.docker_backend import DockerBackend, DockerImages

    tag = f"h-backend-orphan:{secrets.token_hex(4)}"
    seed = docker_client.containers.create(BASE_IMAGE, ["true"], labels={"h-backend.test": "1"})
    try:
        image = seed.commit(*tag.split(":"))
    finally:
        seed.remove(force=True)
    orphan = docker_client.containers.create(tag, ["true"], labels={"h-backend.test": "1"})
    try:
        docker_client.images.remove(tag, force=True)
        with pytest.raises(Exception):  # noqa: B017 - what docker-py's own view of it does
            docker_client.images.get(image.id)
        used = DockerImages(docker_client).images_in_use()
        assert image.id in used
        assert BASE_IMAGE in {t for i in DockerBackend(docker_client).list_images() for t in i.tags}
    finally:
        orphan.remove(force=True)
