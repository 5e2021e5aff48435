"""Exec server against a real Docker daemon: lifecycle, limits, timeouts, files, grading inputs, bad input."""

from __future__ import annotations

import base64
import os
import threading
import time

import pytest

from tests.conftest import BASE_IMAGE


def create(srv, **kw):
    r = srv.post("/container/create", {"image": BASE_IMAGE, **kw})
    assert r.status_code == 200, r.text
    return r.json()["container_id"]


def run(srv, cid, command, **kw):
    r = srv.post("/container/exec", {"container_id": cid, "command": command, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def managed(docker_client, srv):
    return docker_client.containers.list(all=True, filters={"label": f"swe-rl.exec-server={srv.server_id}"})


# --------------------------------------------------------------------------- lifecycle


def test_lifecycle_create_exec_destroy(exec_server, docker_client):
    health = exec_server.get("/healthz").json()
    assert health["ok"] and health["managed_containers"] == 0

    cid = create(exec_server, lease_id="lease-1", owner="pool-a")
    res = run(exec_server, cid, "echo out; echo err >&2; pwd; exit 7")
    assert res["returncode"] == 7
    assert "out\n" in res["output"] and "err\n" in res["output"] and "/testbed" in res["output"]
    assert res["timed_out"] is False and res["truncated"] is False

    status = exec_server.get("/status").json()
    assert [c["id"] for c in status["containers"]] == [cid]
    assert status["containers"][0]["lease_id"] == "lease-1"

    r = exec_server.post("/container/destroy", {"container_id": cid})
    assert r.status_code == 200 and r.json()["ok"]
    assert managed(docker_client, exec_server) == []
    # Destroying again is a clear 404, not a crash.
    assert exec_server.post("/container/destroy", {"container_id": cid}).status_code == 404


def test_images_lists_local_tags(exec_server):
    body = exec_server.get("/images").json()
    assert BASE_IMAGE in body["images"] and body["count"] == len(body["images"])


def test_env_and_workdir(exec_server):
    cid = create(exec_server, workdir="/work", env={"GREETING": "hello"})
    res = run(exec_server, cid, 'echo "$GREETING $EXTRA"; pwd', env={"EXTRA": "world"})
    assert res["output"] == "hello world\n/work\n"
    assert run(exec_server, cid, "pwd", workdir="/tmp")["output"] == "/tmp\n"


# --------------------------------------------------------------------------- isolation and labels


def test_limits_labels_init_and_no_network(exec_server, docker_client):
    cid = create(exec_server, lease_id="L-9", owner="pool-x", memory="256m", cpus=0.5, pids_limit=64)
    attrs = docker_client.containers.get(cid).attrs
    host = attrs["HostConfig"]
    assert host["Memory"] == 256 * 1024 * 1024
    assert host["MemorySwap"] == 256 * 1024 * 1024  # no swap beyond the limit
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 64
    assert host["NetworkMode"] == "none"
    assert host["Init"] is True
    assert "no-new-privileges" in host["SecurityOpt"]
    labels = attrs["Config"]["Labels"]
    assert labels["swe-rl.managed-by"] == "swe-rl"
    assert labels["swe-rl.exec-server"] == exec_server.server_id
    assert labels["swe-rl.lease-id"] == "L-9" and labels["swe-rl.owner"] == "pool-x"
    assert float(labels["swe-rl.deadline"]) > time.time()
    # Only loopback inside.
    res = run(exec_server, cid, "ls /sys/class/net")
    assert res["output"].split() == ["lo"]


def test_default_limits_applied(exec_server, docker_client):
    cid = create(exec_server)
    host = docker_client.containers.get(cid).attrs["HostConfig"]
    assert host["Memory"] == 4 * 1024**3 and host["PidsLimit"] == 1024 and host["NanoCpus"] == 2 * 10**9


def test_network_only_when_asked(exec_server, docker_client):
    cid = create(exec_server, network=True)
    assert docker_client.containers.get(cid).attrs["HostConfig"]["NetworkMode"] != "none"


def test_network_refused_when_disabled(exec_server_factory):
    srv = exec_server_factory(SWE_EXEC_ALLOW_NETWORK="0")
    r = srv.post("/container/create", {"image": BASE_IMAGE, "network": True})
    assert r.status_code == 403 and "network" in r.json()["error"]


def test_pids_limit_stops_fork_bomb(exec_server):
    cid = create(exec_server, pids_limit=32)
    res = run(exec_server, cid, "for i in $(seq 100); do sleep 30 & done; wait", timeout=5)
    # Forks fail past the limit; the command still finishes or is killed, the container survives.
    assert "Resource temporarily unavailable" in res["output"] or res["timed_out"]
    assert run(exec_server, cid, "echo alive", timeout=30)["output"] == "alive\n"


# --------------------------------------------------------------------------- timeouts


def test_timeout_kills_whole_process_group_inside_container(exec_server):
    cid = create(exec_server)
    t0 = time.monotonic()
    res = run(exec_server, cid, "sleep 300 & setsid sleep 301 & echo started; sleep 302", timeout=1.5)
    assert res["timed_out"] is True and res["returncode"] == 124
    assert "started" in res["output"]
    assert time.monotonic() - t0 < 120  # killed at its timeout, not after the commands' 300 s
    # Nothing of the command is left running inside the container.
    ps = run(exec_server, cid, "ps -eo args")["output"]
    assert "sleep 30" not in ps, ps
    # And the container is still usable.
    assert run(exec_server, cid, "echo ok")["output"] == "ok\n"


def test_timeout_with_output_flood_keeps_head_and_tail(exec_server):
    cid = create(exec_server)
    res = run(exec_server, cid, "yes flood", timeout=2)
    assert res["timed_out"] and res["truncated"]
    assert res["output"].startswith("flood\n") and "bytes of output truncated" in res["output"]
    assert len(res["output"].encode()) < 1.2 * (1 << 20)
    assert "yes" not in run(exec_server, cid, "ps -eo comm")["output"].split()


def test_long_exec_does_not_block_other_calls(exec_server, docker_client):
    a, b = create(exec_server), create(exec_server)
    inside_a = docker_client.containers.get(a)
    results = {}
    long = "touch /tmp/started; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo done"  # until the test says
    t = threading.Thread(target=lambda: results.update(long=run(exec_server, a, long, timeout=120)))
    t.start()
    try:
        deadline = time.monotonic() + 60  # a bound on waiting for the start, not a speed requirement
        while inside_a.exec_run("test -e /tmp/started").exit_code != 0:
            assert time.monotonic() < deadline and t.is_alive(), results
            time.sleep(0.1)
        assert run(exec_server, b, "echo quick")["output"] == "quick\n"
        assert "long" not in results  # answered while the long call still runs
    finally:
        inside_a.exec_run("touch /tmp/go")
        t.join(120)
    assert results["long"]["output"] == "done\n"


# --------------------------------------------------------------------------- output


def test_huge_output_is_capped_head_and_tail(exec_server):
    cid = create(exec_server)
    res = run(exec_server, cid, "echo HEAD; head -c 30000000 /dev/zero | tr '\\0' x; echo; echo TAIL")
    assert res["returncode"] == 0 and res["truncated"] is True
    assert res["output_bytes"] > 30_000_000
    assert res["output"].startswith("HEAD\n") and res["output"].endswith("TAIL\n")
    assert len(res["output"].encode()) < (1 << 20) + 200


def test_invalid_utf8_output_never_breaks_a_response(exec_server):
    cid = create(exec_server)
    res = run(exec_server, cid, "printf 'ok \\377\\376 \\xe2\\x82 end'; head -c 2000 /dev/urandom")
    assert res["returncode"] == 0
    assert res["output"].startswith("ok \ufffd\ufffd") and "end" in res["output"]


def test_output_cap_per_request(exec_server):
    cid = create(exec_server)
    res = run(exec_server, cid, "seq 1 100000", max_output_bytes=1000)
    assert res["truncated"] and res["output"].startswith("1\n2\n") and res["output"].endswith("100000\n")


# --------------------------------------------------------------------------- files and diff


def test_write_read_exact_bytes(exec_server):
    cid = create(exec_server)
    blob = os.urandom(300_000) + b"\x00\xff" + "ünïcödé ✓".encode()
    r = exec_server.post(
        "/container/write_file",
        {
            "container_id": cid,
            "path": "deep/dir/with space/blob.bin",
            "content_b64": base64.b64encode(blob).decode(),
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "/testbed/deep/dir/with space/blob.bin"
    r = exec_server.post(
        "/container/read_file", {"container_id": cid, "path": "/testbed/deep/dir/with space/blob.bin"}
    )
    body = r.json()
    assert body["encoding"] == "base64" and base64.b64decode(body["content"]) == blob
    # Text round-trips as text, unicode path included.
    text = "line 1\n\tpäth ✓\n"
    assert (
        exec_server.post(
            "/container/write_file",
            {"container_id": cid, "path": "/testbed/ü.txt", "content": text, "mode": 0o755},
        ).status_code
        == 200
    )
    body = exec_server.post("/container/read_file", {"container_id": cid, "path": "ü.txt"}).json()
    assert body["encoding"] == "utf-8" and body["content"] == text and body["mode"] == 0o755
    assert run(exec_server, cid, "cat ü.txt")["output"] == text


def test_read_file_errors(exec_server):
    cid = create(exec_server)
    r = exec_server.post("/container/read_file", {"container_id": cid, "path": "/nope/missing.txt"})
    assert r.status_code == 404 and "no such file" in r.json()["error"]
    r = exec_server.post("/container/read_file", {"container_id": cid, "path": "/etc"})
    assert r.status_code == 400 and "directory" in r.json()["error"]
    r = exec_server.post(
        "/container/read_file", {"container_id": cid, "path": "/etc/passwd", "max_bytes": 10}
    )
    assert r.status_code == 413
    run(exec_server, cid, "echo target > /tmp/t && ln -s /tmp/t /tmp/link")
    assert (
        exec_server.post("/container/read_file", {"container_id": cid, "path": "/tmp/link"}).json()["content"]
        == "target\n"
    )


def test_write_file_without_create_dirs(exec_server):
    cid = create(exec_server)
    r = exec_server.post(
        "/container/write_file",
        {"container_id": cid, "path": "/no/such/dir/f", "content": "x", "create_dirs": False},
    )
    assert r.status_code == 404


def _init_repo(srv, cid):
    run(srv, cid, "git init -q . && printf 'a\\nb\\nc\\n' > f.txt && git add . && git commit -qm base")


def test_diff_includes_new_deleted_and_binary_files(exec_server):
    cid = create(exec_server)
    _init_repo(exec_server, cid)
    run(
        exec_server,
        cid,
        "printf 'a\\nB\\nc\\n' > f.txt && printf '\\000\\001\\377' > bin.dat && echo n > new.txt",
    )
    patch = exec_server.post("/container/diff", {"container_id": cid}).json()
    assert patch["encoding"] == "utf-8"
    text = patch["patch"]
    assert "+B" in text and "new.txt" in text and "GIT binary patch" in text
    # The patch re-applies exactly on a fresh checkout.
    other = create(exec_server)
    _init_repo(exec_server, other)
    r = exec_server.post(
        "/container/evaluate",
        {"container_id": other, "patch": text, "eval_script": "cat f.txt; od -An -tx1 bin.dat"},
    )
    res = r.json()
    assert res["apply_status"] == "applied" and res["apply_strategy"] == "git apply"
    assert "a\nB\nc\n" in res["test_log"] and "00 01 ff" in res["test_log"]


def test_diff_in_non_git_dir_is_a_clear_error(exec_server):
    cid = create(exec_server)
    r = exec_server.post("/container/diff", {"container_id": cid, "workdir": "/tmp"})
    assert r.status_code == 422 and "git diff failed" in r.json()["error"]


# --------------------------------------------------------------------------- evaluate


def test_evaluate_apply_fallback_and_failure(exec_server):
    cid = create(exec_server)
    _init_repo(exec_server, cid)
    good = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    # A context line that no longer matches: git apply refuses, patch with fuzz applies.
    run(exec_server, cid, "seq 1 9 > g.txt && git add g.txt && git commit -qm g")
    fuzzy = "--- a/g.txt\n+++ b/g.txt\n@@ -2,7 +2,7 @@\n WRONG\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n"
    bad = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n x\n-y\n+Y\n z\n"
    r = exec_server.post(
        "/container/evaluate", {"container_id": cid, "patch": fuzzy, "eval_script": "cat g.txt"}
    )
    res = r.json()
    assert res["apply_status"] == "applied" and res["apply_strategy"].startswith("patch"), res
    assert res["test_log"] == "1\n2\n3\n4\nFIVE\n6\n7\n8\n9\n" and res["returncode"] == 0

    other = create(exec_server)
    _init_repo(exec_server, other)
    res = exec_server.post(
        "/container/evaluate", {"container_id": other, "patch": bad, "eval_script": "echo SHOULD-NOT-RUN"}
    ).json()
    assert res["apply_status"] == "failed" and res["test_log"] == "" and res["returncode"] is None
    # A failed apply leaves the checkout clean.
    assert run(exec_server, other, "git status --porcelain")["output"] == ""
    res = exec_server.post(
        "/container/evaluate", {"container_id": other, "patch": good, "eval_script": "exit 3"}
    ).json()
    assert res["apply_status"] == "applied" and res["returncode"] == 3


def test_evaluate_empty_patch_and_timeout(exec_server):
    cid = create(exec_server)
    res = exec_server.post(
        "/container/evaluate",
        {"container_id": cid, "patch": "", "eval_script": "echo start; sleep 100", "timeout": 1.5},
    ).json()
    assert res["apply_status"] == "empty" and res["timed_out"] is True and "start" in res["test_log"]


# --------------------------------------------------------------------------- auth and bad input


def test_auth_required_everywhere_but_healthz(exec_server):
    import httpx

    assert httpx.get(exec_server.url + "/healthz").status_code == 200
    for method, path in [
        ("GET", "/status"),
        ("GET", "/images"),
        ("POST", "/container/create"),
        ("POST", "/container/exec"),
        ("POST", "/container/destroy"),
        ("POST", "/containers/touch"),
    ]:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": exec_server.token}):
            r = httpx.request(method, exec_server.url + path, headers=headers, json={})
            assert r.status_code == 401, (path, headers)
            assert "unauthorized" in r.json()["error"]


def test_bad_input_gets_clear_4xx_and_creates_nothing(exec_server, docker_client):
    import httpx

    cid = create(exec_server)
    cases = [
        ("/container/create", b"{not json", 400),
        ("/container/create", b"[1, 2]", 400),
        ("/container/create", {}, 400),
        ("/container/create", {"image": "no/such-image:never"}, 404),
        ("/container/create", {"image": "bad image; rm -rf /"}, 400),
        ("/container/create", {"image": BASE_IMAGE, "memory": "lots"}, 400),
        ("/container/create", {"image": BASE_IMAGE, "cpus": "2"}, 400),
        ("/container/create", {"image": BASE_IMAGE, "lease_id": "x" * 500}, 400),
        ("/container/create", {"image": BASE_IMAGE, "workdir": "relative"}, 400),
        ("/container/create", {"image": BASE_IMAGE, "env": {"BAD NAME": "x"}}, 400),
        ("/container/exec", {"container_id": cid}, 400),
        ("/container/exec", {"command": "ls"}, 400),
        ("/container/exec", {"container_id": "abc$(reboot)", "command": "ls"}, 400),
        ("/container/exec", {"container_id": "a;b", "command": "ls"}, 400),
        ("/container/exec", {"container_id": "deadbeefdeadbeef", "command": "ls"}, 404),
        ("/container/exec", {"container_id": cid, "command": "ls", "timeout": -1}, 400),
        ("/container/exec", {"container_id": cid, "command": "ls", "timeout": "10"}, 400),
        ("/container/exec", {"container_id": cid, "command": "a\x00b"}, 400),
        ("/container/write_file", {"container_id": cid, "path": "x", "content_b64": "%%%"}, 400),
        ("/container/write_file", {"container_id": cid, "path": "x"}, 400),
        ("/container/write_file", {"container_id": cid, "path": "/tmp/"}, 400),
        ("/container/read_file", {"container_id": cid}, 400),
        ("/container/diff", {"container_id": cid, "base": "HEAD; rm -rf /"}, 400),
        ("/container/evaluate", {"container_id": cid, "patch": "x"}, 400),
        ("/containers/touch", {"container_ids": "abc"}, 400),
    ]
    for path, body, status in cases:
        if isinstance(body, bytes):
            r = httpx.post(exec_server.url + path, content=body, headers=exec_server.headers)
        else:
            r = exec_server.post(path, body)
        assert r.status_code == status, (path, body, r.status_code, r.text)
        assert isinstance(r.json()["error"], str) and "Traceback" not in r.text
    assert [c.id for c in managed(docker_client, exec_server)] == [cid]


def test_oversized_body_is_413(exec_server_factory):
    srv = exec_server_factory(SWE_EXEC_MAX_BODY_BYTES="100000")
    r = srv.post("/container/exec", {"container_id": "x", "command": "x" * 200_000})
    assert r.status_code == 413 and "error" in r.json()


def test_capacity_429(exec_server_factory, docker_client):
    srv = exec_server_factory(SWE_EXEC_MAX_CONTAINERS="2")
    create(srv)
    create(srv)
    r = srv.post("/container/create", {"image": BASE_IMAGE})
    assert r.status_code == 429 and r.headers["Retry-After"] and "full" in r.json()["error"]
    assert len(managed(docker_client, srv)) == 2
    assert srv.get("/healthz").json()["free"] == 0


# --------------------------------------------------------------------------- failures and reaping


def test_container_killed_externally_gives_clear_error(exec_server, docker_client):
    cid = create(exec_server)
    docker_client.containers.get(cid).kill()
    r = exec_server.post("/container/exec", {"container_id": cid, "command": "echo hi"})
    assert r.status_code in (409, 410) and "not running" in r.json()["error"]
    docker_client.containers.get(cid).remove(force=True)
    r = exec_server.post("/container/exec", {"container_id": cid, "command": "echo hi"})
    assert r.status_code == 410 and "no longer exists" in r.json()["error"]


def test_reaper_removes_expired_and_idle_but_never_foreign(exec_server_factory, docker_client):
    srv = exec_server_factory(SWE_EXEC_REAP_INTERVAL="0.5")
    busy = create(srv, idle_ttl=6)  # its call must start within 6 s: it is sent before anything else
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(run(srv, busy, "sleep 10")))  # busy past its idle TTL
    t.start()
    short_life = create(srv, ttl=1.5)
    idle = create(srv, idle_ttl=1.5)
    kept = create(srv)
    # Created first, started inside the try: a start that fails (a daemon without its bridge) left them behind.
    foreign = docker_client.containers.create(
        BASE_IMAGE,
        ["sleep", "60"],
        network_mode="none",
        labels={"swe-rl.managed-by": "swe-rl", "swe-rl.exec-server": "someone-else", "swe-rl.deadline": "1"},
    )
    plain = docker_client.containers.create(BASE_IMAGE, ["sleep", "60"], network_mode="none")
    try:
        foreign.start()
        plain.start()
        t.join(120)
        assert done["returncode"] == 0  # the reaper left it alone while the call ran
        deadline = time.monotonic() + 60  # a bound on waiting for the reaper, not a speed requirement
        while {short_life, idle} & {c.id for c in managed(docker_client, srv)}:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        ids = {c.id for c in managed(docker_client, srv)}
        assert short_life not in ids and idle not in ids
        assert kept in ids and busy in ids  # touched / busy containers stay
        docker_client.containers.get(foreign.id)
        docker_client.containers.get(plain.id)
        touch = srv.post("/containers/touch", {"container_ids": [kept, short_life]}).json()
        assert touch == {"touched": 1, "missing": [short_life]}
    finally:
        foreign.remove(force=True)
        plain.remove(force=True)


def test_restart_adopts_live_containers(exec_server):
    cid = create(exec_server)
    run(exec_server, cid, "echo persisted > /tmp/state")
    exec_server.restart()
    assert run(exec_server, cid, "cat /tmp/state")["output"] == "persisted\n"
    assert exec_server.get("/healthz").json()["managed_containers"] == 1


@pytest.mark.slow  # starts the server as a subprocess (flask, docker imports): seconds
@pytest.mark.parametrize(
    "entry", [["-m", "swe_rl.fleet.exec.app"], ["server/exec_server.py"]], ids=["module", "server-wrapper"]
)
def test_refuses_to_start_without_token(tmp_path, entry):
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("SWE_EXEC_TOKEN")}
    p = subprocess.run(
        [sys.executable, *entry, "--port", "1"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode != 0 and "no token" in p.stderr


@pytest.mark.parametrize("n", [8])
def test_parallel_execs(exec_server, n):
    cids = [create(exec_server) for _ in range(2)]
    out: list = [None] * n
    threads = [
        threading.Thread(target=lambda i=i: out.__setitem__(i, run(exec_server, cids[i % 2], f"echo {i}")))
        for i in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [o["output"] for o in out] == [f"{i}\n" for i in range(n)]
