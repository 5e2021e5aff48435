"""Every bad input is a 4xx JSON error naming the field, on both servers (real fleet, real Docker).

Also Docker's own refusals: a create the daemon rejects is the request's fault (400 with Docker's
reason and no host path), and the pool passes it on as a client error, never as a node failure.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

from tests.conftest import BASE_IMAGE

NESTED = b'{"image": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HOST_PATH_HINTS = ("/var/lib/docker", "overlay2", "/run/containerd")


def check(resp: httpx.Response, status: int | tuple[int, ...], field: str | None = None) -> dict[str, Any]:
    statuses = status if isinstance(status, tuple) else (status,)
    assert resp.status_code in statuses, (resp.status_code, resp.text[:500])
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body["error"], str) and "Traceback" not in resp.text
    if field is not None:
        assert field in body["error"], body
    for hint in HOST_PATH_HINTS:
        assert hint not in resp.text, resp.text
    return body


def raw(url: str, path: str, token: str, content: bytes) -> httpx.Response:
    return httpx.post(
        url + path,
        content=content,
        timeout=60,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def managed(docker_client: Any, server_id: str) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"swe-rl.exec-server={server_id}"})


# --------------------------------------------------------------------------- exec server


def test_exec_server_rejects_malformed_values(exec_server, docker_client):
    srv = exec_server
    cid = srv.post("/container/create", {"image": BASE_IMAGE}).json()["container_id"]
    for path in ("/container/create", "/container/exec", "/warm"):
        check(raw(srv.url, path, srv.token, NESTED), 400, "nested")
    cases = [
        ('{"container_id": "%s", "command": "true", "timeout": NaN}' % cid, "timeout"),
        ('{"container_id": "%s", "command": "true", "timeout": 1e400}' % cid, "timeout"),
        ('{"container_id": "%s", "command": "echo \\udcff"}' % cid, "command"),
        ('{"container_id": "%s", "command": "true", "env": {"A": "\\ud800"}}' % cid, "env"),
    ]
    for text, field in cases:
        check(raw(srv.url, "/container/exec", srv.token, text.encode()), 400, field)
    body = '{"container_id": "%s", "path": "/tmp/x", "content": "a\\udcffb"}' % cid
    check(raw(srv.url, "/container/write_file", srv.token, body.encode()), 400, "content")
    check(srv.post("/container/exec", {"container_id": cid, "command": "true", "env": []}), 400, "env")
    check(srv.post("/container/create", {"image": BASE_IMAGE, "env": []}), 400, "env")
    check(srv.post("/container/create", {"image": BASE_IMAGE, "env": "A=1"}), 400, "env")
    check(
        srv.post(
            "/container/write_file", {"container_id": cid, "path": "/tmp/m", "content": "x", "mode": 0.5}
        ),
        400,
        "mode",
    )
    check(srv.post("/warm", {"image": BASE_IMAGE, "count": 1.5}), 400, "count")
    # the container is untouched and still works
    out = srv.post("/container/exec", {"container_id": cid, "command": "echo ok"}).json()
    assert out["output"] == "ok\n"
    assert [c.id for c in managed(docker_client, srv.server_id)] == [cid]


def test_exec_server_create_out_of_range_is_400_and_creates_nothing(exec_server, docker_client):
    srv = exec_server
    cpus = os.cpu_count() or 1
    cases = [
        ({"memory": "1"}, "memory"),
        ({"memory": 1}, "memory"),
        ({"memory": "100000g"}, "memory"),
        ({"cpus": cpus + 1}, "cpus"),
        ({"cpus": 0}, "cpus"),
        ({"workdir": "/proc/self"}, "workdir"),
        ({"workdir": "/sys/x"}, "workdir"),
        ({"workdir": "/testbed/../proc"}, "workdir"),
        ({"workdir": "/" + "a" * 5000}, "workdir"),
        ({"pids_limit": 1.5}, "pids_limit"),
    ]
    for extra, field in cases:
        check(srv.post("/container/create", {"image": BASE_IMAGE, **extra}), 400, field)
        check(srv.post("/warm", {"image": BASE_IMAGE, "count": 1, **extra}), 400, field)
    # a workdir through a file: only the daemon can tell; its refusal is the request's fault
    body = check(srv.post("/container/create", {"image": BASE_IMAGE, "workdir": "/etc/passwd/sub"}), 400)
    assert "docker" in body["error"] or "workdir" in body["error"], body
    time.sleep(0.5)
    assert managed(docker_client, srv.server_id) == []
    assert srv.get("/status").json()["warm_targets"] == []


def test_read_file_symlink_loop_is_4xx_without_host_paths(exec_server):
    srv = exec_server
    cid = srv.post("/container/create", {"image": BASE_IMAGE}).json()["container_id"]
    out = srv.post(
        "/container/exec",
        {
            "container_id": cid,
            "command": "ln -s /tmp/b /tmp/a && ln -s /tmp/a /tmp/b && ln -s self /tmp/self",
        },
    )
    assert out.json()["returncode"] == 0
    for path in ("/tmp/a", "/tmp/self", "/tmp/a/inside"):
        check(srv.post("/container/read_file", {"container_id": cid, "path": path}), (400, 404, 422), None)


def test_write_file_onto_a_directory_is_400_and_keeps_the_directory(exec_server):
    """Docker's tar upload would replace a directory by the file: refused before it is sent."""
    srv = exec_server
    cid = srv.post("/container/create", {"image": BASE_IMAGE}).json()["container_id"]
    assert (
        srv.post(
            "/container/exec", {"container_id": cid, "command": "mkdir -p /tmp/d && touch /tmp/d/keep"}
        ).json()["returncode"]
        == 0
    )
    body = check(
        srv.post("/container/write_file", {"container_id": cid, "path": "/tmp/d", "content": "x"}), 400
    )
    assert "is a directory" in body["error"]
    out = srv.post(
        "/container/exec", {"container_id": cid, "command": "test -f /tmp/d/keep && echo kept"}
    ).json()
    assert out["output"].strip() == "kept"
    # a plain file is still overwritten, a new one still created
    for _ in range(2):
        assert (
            srv.post(
                "/container/write_file", {"container_id": cid, "path": "/tmp/d/f", "content": "y"}
            ).status_code
            == 200
        )


def test_exec_server_body_limit_is_413_json(exec_server_factory):
    srv = exec_server_factory(SWE_EXEC_MAX_BODY_BYTES="100000")
    check(srv.post("/container/exec", {"container_id": "x", "command": "x" * 200_000}), 413)


# --------------------------------------------------------------------------- pool


def test_pool_rejects_malformed_values_before_forwarding(fleet, pool_factory, docker_client):
    (srv,) = fleet(1)
    pool = pool_factory([srv])
    lid = pool.call("/allocate", {"image": BASE_IMAGE})["lease_id"]
    for path in ("/allocate", "/exec", "/close", "/warm"):
        check(raw(pool.url, path, pool.token, NESTED), 400, "nested")
    cases = [
        ("/exec", '{"lease_id": "%s", "command": "true", "timeout": NaN}' % lid, "timeout"),
        ("/exec", '{"lease_id": "%s", "command": "true", "timeout": 1e400}' % lid, "timeout"),
        ("/exec", '{"lease_id": "%s", "command": "true", "timeout": -Infinity}' % lid, "timeout"),
        (
            "/evaluate",
            '{"lease_id": "%s", "patch": "", "eval_script": "true", "timeout": NaN}' % lid,
            "timeout",
        ),
        ("/exec", '{"lease_id": "%s", "command": "echo \\udcff"}' % lid, "command"),
        ("/exec", '{"lease_id": "%s", "command": "true", "env": {"A": "\\udcff"}}' % lid, "env"),
        ("/write_file", '{"lease_id": "%s", "path": "/tmp/x", "content": "\\udcff"}' % lid, "content"),
        ("/allocate", '{"image": "%s", "cpus": NaN}' % BASE_IMAGE, "cpus"),
        ("/allocate", '{"image": "%s", "env": {"A": "\\udcff"}}' % BASE_IMAGE, "env"),
    ]
    for path, text, field in cases:
        check(raw(pool.url, path, pool.token, text.encode()), 400, field)
    check(pool.post("/allocate", {"image": BASE_IMAGE, "env": []}), 400, "env")
    check(pool.post("/exec", {"lease_id": lid, "command": "true", "env": []}), 400, "env")
    check(pool.post("/warm", {"image": BASE_IMAGE, "count": 1, "memory": {"a": 1}}), 400, "memory")
    assert pool.call("/exec", {"lease_id": lid, "command": "echo ok"})["output"] == "ok\n"
    assert pool.status()["nodes"][0]["healthy"] is True


def test_pool_passes_docker_refusals_through_as_client_errors(fleet, pool_factory, docker_client):
    (srv,) = fleet(1)
    pool = pool_factory([srv], SWE_POOL_WARM_MIN="1")
    cpus = os.cpu_count() or 1
    for extra, field in (
        ({"memory": "1"}, "memory"),
        ({"cpus": cpus + 1}, "cpus"),
        ({"workdir": "/proc/1"}, "workdir"),
        ({"workdir": "/etc/passwd/sub"}, None),
    ):
        body = check(pool.post("/allocate", {"image": BASE_IMAGE, **extra}), 400, field)
        assert not body.get("node_down"), body
    st = pool.status()
    assert st["nodes"][0]["healthy"] is True and st["totals"]["leases"] == 0
    assert 'outcome="node_down"' not in pool.get("/metrics").text
    time.sleep(1.5)  # nothing starts in the background for the rejected specs
    assert managed(docker_client, srv.server_id) == []
    assert srv.get("/status").json()["warm_targets"] == []


def test_pool_body_limit_is_413_json_and_one_log_line(fleet, pool_factory):
    (srv,) = fleet(1)
    pool = pool_factory([srv], SWE_POOL_MAX_BODY_BYTES="100000")
    before = pool.logs()
    check(pool.post("/exec", {"lease_id": "x", "command": "x" * 200_000}), 413)
    resp = httpx.post(pool.url + "/exec", content=b"x" * 200_000, headers=pool.headers, timeout=30)
    check(resp, 413)
    new = pool.logs()[len(before) :]
    assert "Traceback" not in new
    assert sum("413" in line or "too large" in line for line in new.splitlines()) <= 2, new
