"""FleetSandbox: slime's agent-layer Sandbox protocol over a real pool and a real exec server."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import inspect
import io
import ipaddress
import os
import tarfile
import threading
import time
import typing
from pathlib import Path
from typing import Protocol, runtime_checkable

import pytest
from pool_fixtures import PoolProc
from sever_proxy import SeverProxy

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.errors import BadRequest
from swe_rl.fleet.sandbox import FleetSandbox, FleetSandboxConfig, SandboxCommandError, SandboxTimeout

# --------------------------------------------------------------------------- the contract, restated

# slime/agent/sandbox.py at the pinned commit, in our words: an async context manager with a string
# `sandbox_id`; exec(cmd, *, user="root", env=None, timeout=120, check=False, idempotent=True) giving
# (exit code, stdout, stderr); write_file(sandbox_path, content, *, user="root") taking str, bytes or a
# host Path; read_file(sandbox_path, *, user="root") giving text.
P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
NO = inspect.Parameter.empty
EXPECTED = {
    "__aenter__": [],
    "__aexit__": [("exc_type", P, NO), ("exc", P, NO), ("tb", P, NO)],
    "exec": [
        ("cmd", P, NO),
        ("user", K, "root"),
        ("env", K, None),
        ("timeout", K, 120),
        ("check", K, False),
        ("idempotent", K, True),
    ],
    "write_file": [("sandbox_path", P, NO), ("content", P, NO), ("user", K, "root")],
    "read_file": [("sandbox_path", P, NO), ("user", K, "root")],
}


@runtime_checkable
class SandboxShape(Protocol):
    sandbox_id: str

    async def __aenter__(self): ...
    async def __aexit__(self, exc_type, exc, tb): ...
    async def exec(self, cmd, *, user="root", env=None, timeout=120, check=False, idempotent=True): ...
    async def write_file(self, sandbox_path, content, *, user="root"): ...
    async def read_file(self, sandbox_path, *, user="root"): ...


def test_signatures_match_the_pinned_protocol():
    for name, expected in EXPECTED.items():
        method = getattr(FleetSandbox, name)
        assert inspect.iscoroutinefunction(method), name
        params = list(inspect.signature(method).parameters.values())[1:]  # without self
        assert [(p.name, p.kind, p.default) for p in params] == expected, name
    assert "sandbox_id" in FleetSandbox.__annotations__
    # return shapes: (exit code, stdout, stderr); nothing; text. Content: str, bytes or a host Path.
    assert typing.get_type_hints(FleetSandbox.exec)["return"] == tuple[int, str, str]
    assert typing.get_type_hints(FleetSandbox.write_file)["return"] is type(None)
    assert typing.get_type_hints(FleetSandbox.write_file)["content"] == str | bytes | Path
    assert typing.get_type_hints(FleetSandbox.read_file)["return"] is str
    sb = FleetSandbox("any/image", client_config=EnvClientConfig())
    assert isinstance(sb, SandboxShape) and sb.sandbox_id == ""


def test_signatures_match_upstream_when_slime_is_importable():
    upstream = pytest.importorskip("slime.agent.sandbox")
    assert isinstance(FleetSandbox("any/image", client_config=EnvClientConfig()), upstream.Sandbox)
    for name in EXPECTED:
        ours = list(inspect.signature(getattr(FleetSandbox, name)).parameters.values())
        theirs = list(inspect.signature(getattr(upstream.Sandbox, name)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in ours] == [(p.name, p.kind, p.default) for p in theirs], (
            name
        )


def test_settings_from_env(monkeypatch):
    monkeypatch.setenv("SWE_FLEET_SANDBOX_NETWORK", "adapter-net")
    monkeypatch.setenv("SWE_FLEET_SANDBOX_CHUNK_BYTES", "1048576")
    cfg = FleetSandboxConfig.from_env()
    assert cfg.network == "adapter-net" and cfg.chunk_bytes == 1 << 20
    monkeypatch.setenv("SWE_FLEET_SANDBOX_NETWORK", "true")
    assert FleetSandboxConfig.from_env().network is True
    assert FleetSandbox("x", network=False, client_config=EnvClientConfig()).config.network is False


async def test_calls_before_enter_are_refused():
    sb = FleetSandbox("x", client_config=EnvClientConfig())
    with pytest.raises(RuntimeError, match="not entered"):
        await sb.exec("true")


# --------------------------------------------------------------------------- against the real fleet


@pytest.fixture
def pool(fleet, pool_factory) -> PoolProc:
    return pool_factory(fleet(1))


def sandbox(pool: PoolProc, image: str, url: str | None = None, **cfg: object) -> FleetSandbox:
    client_config = EnvClientConfig(
        pool_url=url or pool.url,
        token=pool.token,
        backoff=0.05,
        heartbeat_interval=0.5,
        direct=url is None,  # a proxy in front of the pool: every call through it (call replay is the pool's)
    )
    return FleetSandbox(image, config=FleetSandboxConfig(**cfg), client_config=client_config)


async def add_agent(sb: FleetSandbox) -> None:
    await sb.exec("id agent >/dev/null 2>&1 || useradd -m -s /bin/bash agent", check=True, timeout=60)


async def test_exec_users_env_streams_check_timeout(pool, base_image):
    async with sandbox(pool, base_image) as sb:
        assert sb.sandbox_id and pool.status()["totals"]["leases"] == 1
        expires = sb._lease.expires_at
        await asyncio.sleep(1.2)  # heartbeats while held
        assert sb._lease.expires_at > expires
        await add_agent(sb)
        assert await sb.exec("id -un; echo $HOME") == (0, "root\n/root\n", "")
        assert await sb.exec("id -un; echo $HOME", user="agent") == (0, "agent\n/home/agent\n", "")
        assert await sb.exec("echo out; echo err >&2; exit 3") == (3, "out\n", "err\n")
        assert await sb.exec('printf %s "$GREETING"', env={"GREETING": "hi there"}) == (0, "hi there", "")

        with pytest.raises(SandboxCommandError) as failed:
            await sb.exec("echo partial; echo broken >&2; exit 7", check=True)
        assert isinstance(failed.value, RuntimeError)
        assert (
            failed.value.exit_code == 7
            and failed.value.stdout == "partial\n"
            and "broken" in str(failed.value)
        )
        assert (await sb.exec("true", check=True)) == (0, "", "")

        started = time.monotonic()
        with pytest.raises(SandboxTimeout):
            await sb.exec("echo before; sleep 60", timeout=1, check=False)
        assert time.monotonic() - started < 30
        assert (await sb.exec("echo still usable"))[1] == "still usable\n"

        with pytest.raises(BadRequest, match="no user 'nobody-here'"):
            await sb.exec("true", user="nobody-here")
        with pytest.raises(BadRequest, match="user must be"):
            await sb.exec("true", user="bad user;")


async def test_exec_api_keeps_the_combined_form(pool, base_image):
    """The plain exec call still interleaves both streams into `output`; separated streams are opt-in."""
    async with EnvClient(EnvClientConfig(pool_url=pool.url, token=pool.token)) as client:
        async with client.lease(base_image) as env:
            combined = await env.exec("echo a; echo b >&2")
            assert sorted(combined.output.split()) == ["a", "b"] and combined.stderr is None
            split = await env.exec("echo a; echo b >&2", separate_stderr=True, user="root")
            assert (split.output, split.stderr) == ("a\n", "b\n")
            pool.credentials[env.lease_id] = env.credential  # the raw call is the lease holder's
            raw = pool.post("/exec", {"lease_id": env.lease_id, "command": "true", "separate_stderr": "yes"})
            assert raw.status_code == 400 and "separate_stderr" in raw.json()["error"]


async def test_files_str_bytes_and_large_host_path(pool, base_image, tmp_path):
    async with sandbox(pool, base_image, chunk_bytes=4 << 20) as sb:
        await add_agent(sb)
        text = "naïve — ünïcode\nline 2\n"
        assert await sb.write_file("/opt/notes/a.txt", text) is None  # parents created
        assert await sb.read_file("/opt/notes/a.txt") == text

        await sb.write_file("/home/agent/blob.bin", b"\x00\x01 bytes", user="agent")
        assert (await sb.exec("stat -c %U /home/agent/blob.bin; od -An -tx1 /home/agent/blob.bin"))[
            1
        ].split() == ["agent", "00", "01", "20", "62", "79", "74", "65", "73"]
        await sb.write_file("rel.txt", "in home", user="agent")  # relative: from the user's home
        assert await sb.read_file("/home/agent/rel.txt", user="agent") == "in home"
        await sb.write_file("/tmp/empty", b"", user="agent")
        assert (await sb.exec("stat -c %s:%U /tmp/empty"))[1] == "0:agent\n"

        big = tmp_path / "big.bin"
        payload = os.urandom(11 << 20)  # 11 MiB: three chunks of 4 MiB
        big.write_bytes(payload)
        await sb.write_file("/opt/big.bin", big)
        code, out, _ = await sb.exec("sha256sum /opt/big.bin; stat -c %s /opt/big.bin")
        assert (
            code == 0
            and out.split()[0] == hashlib.sha256(payload).hexdigest()
            and out.split()[2] == str(len(payload))
        )
        await sb.write_file("/home/agent/big.bin", big, user="agent")
        assert (await sb.exec("stat -c %U:%s /home/agent/big.bin"))[1] == f"agent:{len(payload)}\n"
        assert (await sb.exec("ls -A /tmp/.swe-rl-upload"))[1] == ""  # nothing staged is left behind

        # upstream's read_file answers "" when it cannot read; so do we
        assert await sb.read_file("/no/such/file") == ""
        await sb.exec("echo secret > /root/only-root && chmod 600 /root/only-root")
        assert await sb.read_file("/root/only-root") == "secret\n"
        assert await sb.read_file("/root/only-root", user="agent") == ""
        with pytest.raises(SandboxCommandError):  # the agent may not write where root alone may
            await sb.write_file("/root/forbidden.txt", "x", user="agent")
        with pytest.raises(FileNotFoundError):
            await sb.write_file("/tmp/x", tmp_path / "missing")
        with pytest.raises(TypeError):
            await sb.write_file("/tmp/x", 42)  # type: ignore[arg-type]


async def test_harness_lifecycle_tarball_agent_user_and_detached_run(pool, base_image, tmp_path):
    """What upstream's harness does: upload a runtime tarball, make a non-root user, run the agent
    detached with its output in a file and its exit code in a done-marker, and poll for it."""
    tarball = tmp_path / "node-fake.tar"
    with tarfile.open(tarball, "w") as tar:
        script = b"#!/bin/sh\necho v22.0.0-fake\n"
        info = tarfile.TarInfo("node-v22-linux-x64/bin/node")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
        filler = os.urandom(3 << 20)
        info = tarfile.TarInfo("node-v22-linux-x64/lib/blob")
        info.size = len(filler)
        tar.addfile(info, io.BytesIO(filler))

    async with sandbox(pool, base_image, chunk_bytes=1 << 20) as sb:
        await sb.write_file("/tmp/node22.tar", tarball)
        await sb.exec(
            "mkdir -p /opt/node22 && tar xf /tmp/node22.tar -C /opt/node22 --strip-components=1 && "
            "ln -sf /opt/node22/bin/node /usr/local/bin/node && node --version",
            check=True,
            timeout=120,
        )
        await add_agent(sb)
        await sb.exec("mkdir -p /work/repo && chown -R agent:agent /home/agent /work/repo", check=True)

        tag, user = "run", "agent"
        launcher, out_file, done = f"/tmp/.{tag}.sh", f"/work/repo/.{tag}.out", f"/tmp/.{tag}.done"
        body = (
            "#!/bin/bash\ncd /work/repo\necho start as $(id -un) key=$API_KEY\nsleep 6\nnode --version\n"
            "exit 3\n"
        )
        await sb.write_file(launcher, f"#!/bin/bash\n( {body} )\necho $? > {done}\n", user=user)
        await sb.exec(f"rm -f {out_file} {done}", user=user, check=True, timeout=30)
        spawned = time.monotonic()
        await sb.exec(
            f"chmod +x {launcher}; setsid bash {launcher} < /dev/null > {out_file} 2>&1 &",
            user=user,
            env={"API_KEY": "sid-1"},
            timeout=5,
            check=True,
        )
        assert time.monotonic() - spawned < 5  # the call returned while the command keeps running

        exit_code = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            code, out, _ = await sb.exec(f"test -f {done} && cat {done}", user=user, timeout=15)
            if code == 0 and out.strip():
                exit_code = int(out.strip())
                break
        assert exit_code == 3 and time.monotonic() - spawned >= 6
        assert await sb.read_file(out_file, user=user) == "start as agent key=sid-1\nv22.0.0-fake\n"


async def test_a_severed_exec_runs_once_and_only_an_idempotent_one_runs_again(pool, base_image):
    host, port = pool.url.removeprefix("http://").split(":")
    proxy = SeverProxy(host, int(port))
    try:
        async with sandbox(pool, base_image, url=proxy.url) as sb:
            proxy.sever_next(b"POST /exec ")
            # sent again with its call id (swe_rl/fleet/pool/call_replay.py): the first send's answer
            assert await sb.exec("echo once >> /tmp/count; echo ok", idempotent=False) == (0, "ok\n", "")
            assert proxy.severed == 1
            assert await sb.exec("cat /tmp/count") == (0, "once\n", "")  # it ran, exactly once

            proxy.sever_next(b"POST /exec ")
            assert await sb.exec("echo again >> /tmp/count; echo ok", idempotent=True) == (0, "ok\n", "")
            assert proxy.severed == 2
            assert (await sb.exec("cat /tmp/count"))[1] == "once\nagain\nagain\n"  # re-sent: ran twice

            proxy.sever_next(b"POST /write_file ")  # file chunks are idempotent too
            await sb.write_file("/tmp/w.txt", "payload")
            assert proxy.severed == 3 and await sb.read_file("/tmp/w.txt") == "payload"
    finally:
        proxy.close()


def leased_containers(docker_client, lease_id: str) -> list:
    return docker_client.containers.list(
        all=True, filters={"label": f"swe-rl.lease-id={lease_id}"}, ignore_removed=True
    )


def containers_after_release(docker_client, lease_id: str, wait: float = 20.0) -> list:
    """The lease's containers once the pool's background destroy had `wait` seconds (it runs right after close)."""
    deadline = time.monotonic() + wait
    while (left := leased_containers(docker_client, lease_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


async def test_cancellation_and_errors_release_the_lease(pool, base_image, docker_client):
    entered = asyncio.Event()
    holder: dict[str, str] = {}

    async def rollout() -> None:
        async with sandbox(pool, base_image) as sb:
            holder["id"] = sb.sandbox_id
            entered.set()
            await sb.exec("sleep 120", timeout=300)

    task = asyncio.create_task(rollout())
    await asyncio.wait_for(entered.wait(), 60)
    assert len(leased_containers(docker_client, holder["id"])) == 1
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.status()["totals"]["leases"] == 0
    assert containers_after_release(docker_client, holder["id"]) == []

    with pytest.raises(ZeroDivisionError):
        async with sandbox(pool, base_image) as sb:
            holder["id"] = sb.sandbox_id
            raise ZeroDivisionError("the body fails")
    assert (
        pool.status()["totals"]["leases"] == 0 and containers_after_release(docker_client, holder["id"]) == []
    )

    sb = sandbox(pool, base_image)  # upstream also drives __aenter__/__aexit__ by hand
    await sb.__aenter__()
    await sb.__aexit__(None, None, None)
    await sb.__aexit__(None, None, None)  # twice is harmless
    assert pool.status()["totals"]["leases"] == 0


async def test_upstream_helpers_run_unchanged_when_slime_is_importable(pool, base_image):
    """Upstream's own ensure_agent_user and exec_and_wait against our sandbox (slime on PYTHONPATH)."""
    upstream = pytest.importorskip("slime.agent.sandbox")
    async with sandbox(pool, base_image) as sb:
        await sb.exec("mkdir -p /work/repo", check=True)
        await upstream.ensure_agent_user(sb, "/work/repo")
        code, out = await upstream.exec_and_wait(
            sb,
            cmd="sleep 2; id -un; echo $TOKEN; (exit 4)",
            time_budget_sec=60,
            tag="t",
            user="agent",
            env={"TOKEN": "abc"},
            workdir="/work/repo",
            want_output=True,
        )
        assert (code, out) == (4, "agent\nabc\n")


async def test_network_lets_the_container_reach_an_adapter_on_the_host(pool, base_image, docker_client):
    """The coding-agent CLIs call back to an adapter on the training host; with a network they can."""
    ipam = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    gateway = ipam.get("Gateway") or str(
        next(ipaddress.ip_network(ipam["Subnet"]).hosts())
    )  # the host's side

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"adapter says hi"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((gateway, 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fetch = (
        f'python3 -c "import urllib.request; '
        f"print(urllib.request.urlopen('http://{gateway}:{server.server_port}/', timeout=5).read().decode())\""
    )
    try:
        async with sandbox(pool, base_image, network=True) as sb:
            assert await sb.exec(fetch, user="root", timeout=60) == (0, "adapter says hi\n", "")
        async with sandbox(pool, base_image) as sb:  # no network unless asked
            code, _, err = await sb.exec(fetch, timeout=60)
            assert code != 0 and "unreachable" in err.lower()
    finally:
        server.shutdown()
        server.server_close()


async def test_cancelled_while_waiting_for_room_leaves_nothing(fleet, pool_factory, base_image):
    pool = pool_factory(fleet(1), SWE_POOL_MAX_PER_NODE="1")
    async with sandbox(pool, base_image) as first:
        waiting = asyncio.create_task(sandbox(pool, base_image).__aenter__())
        await asyncio.sleep(2)  # the fleet is full: the second allocate keeps retrying
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert [lease["lease_id"] for lease in pool.status()["leases"]] == [first.sandbox_id]
    assert pool.status()["totals"]["leases"] == 0
