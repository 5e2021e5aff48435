"""The in-process environment keeps the fleet's semantics and raises the fleet client's errors:
commands, timeouts (the whole process group killed), capped output, files, directories, the diff,
writes kept inside its directory, and nothing left behind after close. No Docker."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from swe_rl.agent.local_environment import LocalEnvironment, init_repo, local_env_factory, local_environment
from swe_rl.agent.protocols import Environment
from swe_rl.fleet.client import LeaseLost
from swe_rl.fleet.errors import BadRequest, CommandRefused, FileNotFound, IsADirectory
from swe_rl.tasks import TaskInstance

FILES = {"a.py": "x = 1\n", "pkg/b.py": "def f():\n    return 2\n", "blob.bin": bytes(range(256))}


@pytest.fixture
def repo(tmp_path):
    return init_repo(tmp_path / "src", FILES)


@pytest.fixture
async def env(repo, tmp_path):
    async with local_environment(repo, base_dir=tmp_path) as env:
        yield env


async def test_it_is_an_environment_over_a_fresh_clone(env, repo):
    assert isinstance(env, Environment)
    assert env.workdir.endswith("/repo") and env.workdir != str(repo)
    res = await env.exec("pwd; git status --porcelain; cat a.py")
    assert res.ok and res.output == f"{env.workdir}\nx = 1\n"
    assert await env.diff() == ""


async def test_exec_interleaves_output_and_keeps_the_exit_code(env):
    res = await env.exec("echo out; echo err >&2; exit 3", timeout=10)
    assert (res.returncode, res.output, res.timed_out, res.truncated) == (3, "out\nerr\n", False, False)
    assert res.output_bytes == 8 and res.duration >= 0
    killed = await env.exec("kill -9 $$", timeout=10)
    assert killed.returncode == 137  # a signal as the shell (and Docker) report it


async def test_a_timeout_is_a_result_and_kills_the_process_group(env, tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    res = await env.exec(f"sleep 30 & echo $! > {pidfile}; echo started; wait", timeout=0.5)
    assert res.timed_out and res.returncode == 124 and res.output == "started\n"
    assert time.monotonic() - started < 10
    child = int(pidfile.read_text())
    for _ in range(50):  # reaped by init shortly after the kill
        if not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the background child {child} outlived the timeout")


async def test_output_over_the_cap_keeps_head_and_tail(repo, tmp_path):
    async with local_environment(repo, base_dir=tmp_path, max_output_bytes=1000) as env:
        res = await env.exec("echo HEAD; head -c 5000 /dev/zero | tr '\\0' x; echo; echo TAIL", timeout=10)
    assert res.truncated and res.output_bytes == 5 + 5000 + 1 + 5
    assert res.output.startswith("HEAD\nxxx") and res.output.endswith("xxx\nTAIL\n")
    assert "[... 4011 bytes of output truncated ...]" in res.output


async def test_refused_commands_are_command_refused(env):
    for command, timeout in (("echo a\x00b", 10), ("", 10), ("true", 0.01), ("true", 10**6)):
        with pytest.raises(CommandRefused) as err:
            await env.exec(command, timeout=timeout)
        assert isinstance(err.value, BadRequest) and err.value.status == 400


async def test_files_round_trip_bytes_and_text(env):
    await env.write_file("new/dir/c.txt", "Grüße\n")
    assert await env.read_file(f"{env.workdir}/new/dir/c.txt") == "Grüße\n".encode()
    assert await env.read_file("blob.bin") == bytes(range(256))
    await env.write_file("pkg/b.py", b"\x00\x01")
    assert oct(os.stat(f"{env.workdir}/pkg/b.py").st_mode & 0o777) == "0o644"
    assert await env.read_file("pkg/b.py") == b"\x00\x01"


async def test_file_errors_are_the_fleet_clients(env):
    with pytest.raises(FileNotFound) as missing:
        await env.read_file("nope.py")
    assert isinstance(missing.value, FileNotFound) and missing.value.status == 404
    with pytest.raises(IsADirectory):
        await env.read_file("pkg")
    with pytest.raises(BadRequest, match="cannot read") as through:  # a path through a file
        await env.read_file("a.py/x")
    assert type(through.value) is BadRequest and through.value.status == 422
    with pytest.raises(IsADirectory):
        await env.write_file("pkg", "x")
    for outside in ("/etc/swe-rl-never", "../../escape.txt"):
        with pytest.raises(BadRequest, match="outside the in-process environment"):
            await env.write_file(outside, "x")
    os.symlink("/etc", f"{env.workdir}/etc-link")
    with pytest.raises(BadRequest, match="outside"):  # a link cannot carry a write out
        await env.write_file("etc-link/x", "x")
    with pytest.raises(FileNotFound):
        await env.read_file("etc-link/swe-rl-never-there")


async def test_diff_holds_new_changed_deleted_and_binary_files(env):
    await env.write_file("a.py", "x = 2\n")
    await env.write_file("n.txt", "new\n")
    await env.exec("rm pkg/b.py && printf '\\x00\\x02' > blob.bin")
    patch = await env.diff()
    assert "-x = 1\n+x = 2" in patch and "+new" in patch and "deleted file mode" in patch
    assert "GIT binary patch" in patch


async def test_a_broken_repository_diff_is_bad_request(env):
    await env.exec("rm -rf .git")
    with pytest.raises(BadRequest, match="git diff failed"):
        await env.diff()


async def test_close_kills_leftovers_removes_the_directory_and_refuses_calls(repo, tmp_path):
    pidfile = tmp_path / "bg.pid"
    async with local_environment(repo, base_dir=tmp_path) as env:
        res = await env.exec(f"(sleep 60 >/dev/null 2>&1 & echo $! > {pidfile})", timeout=10)
        assert res.ok
        root = env.root
    assert not os.path.exists(root)
    child = int(pidfile.read_text())
    for _ in range(50):
        if not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail("a background process outlived close")
    for call in (env.exec("true"), env.diff(), env.read_file("a.py"), env.write_file("a.py", "")):
        with pytest.raises(LeaseLost):
            await call
    await env.close()  # idempotent


async def test_the_directory_is_removed_when_the_body_fails(repo, tmp_path):
    with pytest.raises(RuntimeError):
        async with local_environment(repo, base_dir=tmp_path) as env:
            root = env.root
            raise RuntimeError("boom")
    assert not os.path.exists(root)
    with pytest.raises(subprocess.CalledProcessError):  # cloning something that is no repository
        async with local_environment(tmp_path / "no-such-repo", base_dir=tmp_path):
            pass
    assert [p.name for p in tmp_path.iterdir()] == ["src"]


async def test_the_factory_gives_each_episode_its_own_clone(repo, tmp_path):
    inst = TaskInstance(instance_id="t-1", repo="o/r", problem_statement="p", image="none")
    factory = local_env_factory(lambda instance: repo, base_dir=tmp_path)
    async with factory(inst) as one, factory(inst) as two:
        await one.write_file("a.py", "changed\n")
        assert (await two.read_file("a.py")) == b"x = 1\n" and one.workdir != two.workdir


def test_a_local_environment_can_wrap_an_existing_checkout(repo):
    env = LocalEnvironment(repo.parent, repo)
    assert env.workdir == os.path.realpath(repo) and not env.owns_root
