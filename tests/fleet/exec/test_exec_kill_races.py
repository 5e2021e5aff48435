"""A timed-out command's answer leaves only after its whole process tree died, whatever order the kills
run in (real Docker, the real `DockerExecutor`).

Each test forces one interleaving at the executor's hook points (`before_kill`, `awaiting_kill`), never
by sleeping: a kill held back until its command's answer is already waiting (what a loaded node does to
a kill queued behind another container's killer), and two timeouts whose kills run in the reverse order
of their commands. The load test that found the race is `test_exec_escape.py`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator

import pytest

from swe_rl.fleet.exec.docker_exec import DockerExecutor
from swe_rl.fleet.exec.executor import MARKER_VAR, TICKS, CommandStart
from tests.conftest import BASE_IMAGE, TEST_ID_PREFIX

BOUND = 120  # far above a kill's time: only a hang reaches it


def start_container(docker_client, command: list[str], init: bool = True):
    """A container of the session's prefix (the end-of-session sweep finds it) running `command`."""
    return docker_client.containers.run(
        BASE_IMAGE,
        command,
        name=f"{TEST_ID_PREFIX}kill-{secrets.token_hex(4)}",
        labels={"swe-rl.managed-by": "swe-rl", "swe-rl.exec-server": f"{TEST_ID_PREFIX}kill"},
        init=init,
        detach=True,
        network_mode="none",
    )


@pytest.fixture
def box(docker_client, base_image) -> Iterator[tuple[DockerExecutor, str]]:
    """An executor in this process and one container of the session's prefix (removed even on failure)."""
    c = start_container(docker_client, ["sleep", "infinity"])
    try:
        yield DockerExecutor(docker_client), c.id
    finally:
        c.remove(force=True)


def run(ex: DockerExecutor, cid: str, command: str, timeout: float = 30) -> dict:
    o = ex.run(cid, command, timeout=timeout, workdir=None, env=None, max_output=1 << 16)
    return {"timed_out": o.timed_out, "output": o.output.decode(), "returncode": o.returncode}


def sleeps(ex: DockerExecutor, cid: str) -> list[str]:
    out = run(ex, cid, "ps -eo args --no-headers")["output"]
    return sorted(line for line in out.splitlines() if line.startswith("sleep ") and line != "sleep infinity")


def test_answer_waits_for_a_kill_that_runs_late(box):
    """The kill is held until the answer waits for it: the escaped process is dead when the answer leaves.
    (Before the fix the answer left after a 5 s drain, with `env -i setsid sleep` still running.)"""
    ex, cid = box
    answer_waiting = threading.Event()
    seen_alive: list[list[str]] = []

    def before_kill(tag: str) -> None:
        assert answer_waiting.wait(BOUND), "the answer never waited for its kill"
        seen_alive.append(sleeps(ex, cid))  # the kill has not run: the escape is alive here

    ex.before_kill = before_kill
    ex.awaiting_kill = lambda tag: answer_waiting.set()
    res = run(ex, cid, "env -i setsid sleep 351 >/dev/null 2>&1 & echo started; sleep 300", timeout=1)
    ex.before_kill = ex.awaiting_kill = None
    assert res["timed_out"] is True and res["returncode"] == 124 and "started" in res["output"]
    assert seen_alive == [["sleep 300", "sleep 351"]]
    assert sleeps(ex, cid) == []


def test_two_timeouts_killed_in_reverse_order(box):
    """Command A times out first but its kill waits until B timed out and B's answer left; B's kill runs
    while A and its escape are alive (A's processes must survive it: A is still running to B's killer),
    then A's kill: nothing of either is left, and each answer left after its own kill."""
    ex, cid = box
    tags: dict[str, str] = {}
    b_done = threading.Event()
    order: list[str] = []

    def before_kill(tag: str) -> None:
        if tag == tags.get("a"):
            assert b_done.wait(BOUND), "B never answered"
        order.append("kill-" + ("a" if tag == tags.get("a") else "b"))

    ex.before_kill = before_kill
    results: dict[str, dict] = {}
    orig_running = ex._running

    class Spy(dict):  # learns each command's tag as it registers (the order of `run` calls)
        def __setitem__(self, k: str, v: tuple[str, float]) -> None:
            if not k.startswith("kill-"):
                tags.setdefault("a" if "a" not in tags else "b", k)
            super().__setitem__(k, v)

    ex._running = Spy(orig_running)
    a = threading.Thread(
        target=lambda: results.update(
            a=run(ex, cid, "env -i setsid sleep 361 & echo a; sleep 300", timeout=1)
        )
    )
    a.start()
    while "a" not in tags:  # A registered before B starts: B's timeout comes second
        a.join(0.01)
    results["b"] = run(ex, cid, "( (env -i sleep 362 &) & ); echo b; sleep 300", timeout=2)
    order.append("answer-b")
    b_done.set()
    a.join(BOUND)
    ex.before_kill = None
    assert not a.is_alive()
    assert results["a"]["timed_out"] and results["b"]["timed_out"]
    assert order == ["kill-b", "answer-b", "kill-a"], order
    assert sleeps(ex, cid) == []


def test_deadline_before_the_command_started(box):
    """A deadline already past when the exec starts (the daemon answers `exec_start` before it starts
    the process, so the first kill may find no process): the command dies all the same."""
    ex, cid = box
    for i in range(3):
        res = run(ex, cid, f"env -i setsid sleep 37{i} & sleep 300", timeout=0.001)
        assert res["timed_out"] is True
    assert sleeps(ex, cid) == []


def test_later_passes_keep_the_commands_start(box):
    """The killer fixes its cutoff (the start of the command's oldest live process) before killing and
    keeps it for every later round: recomputed once the tagged processes were dead it fell back to the
    command's age, and a process started before the command but inside that age died with it (seen in CI:
    a fresh container's `sleep infinity`, so the container stopped and the next exec got 409)."""
    ex, cid = box
    api = ex.api

    def start(argv: list[str], env: dict[str, str] | None = None) -> None:
        api.exec_start(api.exec_create(cid, argv, environment=env)["Id"], detach=True)

    def alive() -> list[str]:
        return sleeps(ex, cid)

    start(["sleep", "501"])  # a bystander: no tag, started before the command
    while alive() != ["sleep 501"]:
        pass
    ticks_before = run(ex, cid, "cut -d' ' -f22 /proc/self/stat")["output"]
    while run(ex, cid, "cut -d' ' -f22 /proc/self/stat")["output"] == ticks_before:
        pass  # the command starts at least one clock tick after the bystander
    start(["sleep", "502"], {MARKER_VAR: "the-command"})
    while alive() != ["sleep 501", "sleep 502"]:
        pass
    # The command "started" a minute ago by the server's clocks: the start fallback reaches the bystander.
    a_minute_ago = CommandStart(time.monotonic() - 60, CommandStart.now().boot_tick - 60 * TICKS)
    used = ex._kill_inside(cid, "the-command", "kill-the-command", "", a_minute_ago)
    assert used and used.isdigit()
    assert alive() == ["sleep 501"]
    # A later pass with the cutoff kept spares it too.
    assert ex._kill_inside(cid, "the-command", "kill-the-command", used, a_minute_ago) == used
    assert alive() == ["sleep 501"]


def _start_tick(ex: DockerExecutor, cid: str, args: str) -> int:
    out = run(ex, cid, f"for p in $(pgrep -fx '{args}'); do cut -d' ' -f22 /proc/$p/stat; done")["output"]
    (tick,) = out.split()
    return int(tick)


@pytest.mark.parametrize("same_kernel", [True, False])
def test_with_nothing_of_the_command_alive_its_start_is_the_cutoff(box, same_kernel):
    """A kill pass that finds nothing of the command alive (no tagged process, no host pid: only an escapee
    that cleared its environment) kills what started after the command, and spares a process started the
    tick before it. On this kernel the killer reads the command's start on the boot clock, exact; the
    age the server measured (here one that reaches back a minute, what a late killer clock does to a
    margin) is for a remote daemon only, and there it reaches the bystander. Before the boot clock, the
    age with a 0.2 s margin was the only fallback (suspected in a side-by-side CI run: a container's own
    `sleep infinity` killed, the container stopped)."""
    ex, cid = box
    api = ex.api
    if not same_kernel:
        ex.boot_id = "another-kernel"

    def start(argv: list[str]) -> None:
        api.exec_start(api.exec_create(cid, argv)["Id"], detach=True)

    start(["sleep", "511"])  # a bystander, no tag
    while sleeps(ex, cid) != ["sleep 511"]:
        pass
    before = _start_tick(ex, cid, "sleep 511")
    while int(run(ex, cid, "cut -d' ' -f22 /proc/self/stat")["output"]) <= before:
        pass  # the escapee starts at least one tick after the bystander
    start(["sleep", "512"])  # the escapee: no tag, started after the command
    while sleeps(ex, cid) != ["sleep 511", "sleep 512"]:
        pass
    assert _start_tick(ex, cid, "sleep 512") > before
    command = CommandStart(time.monotonic() - 60, before + 1)  # started in the tick after the bystander
    used = ex._kill_inside(cid, "the-command", "kill-the-command", "", command)
    assert used and (int(used) == before + 1 if same_kernel else int(used) <= before), used
    assert sleeps(ex, cid) == (["sleep 511"] if same_kernel else [])


def test_output_read_with_the_answers_headers_is_kept(box, monkeypatch):
    """Output that reached the socket before the HTTP client read the exec's answer headers is kept. The
    client reads the headers through a buffer that takes whatever else is already there (the command's
    first frames, even its end); reading the raw socket after it lost them (seen under load: `echo err >&2`
    answered '' with exit 0). Forced here: the headers are read only once the command has exited."""
    import http.client

    ex, cid = box
    real_begin = http.client.HTTPResponse.begin
    waited: list[bool] = []

    def begin_after_the_exit(self) -> None:
        if not waited:  # the exec_start's answer (the calls made here read theirs normally)
            waited.append(True)
            for exec_id in ex.api.inspect_container(cid)["ExecIDs"] or []:
                for _ in range(BOUND * 100):
                    if not ex.api.exec_inspect(exec_id)["Running"]:
                        break
                    threading.Event().wait(0.01)
        real_begin(self)

    def run_once(command: str) -> dict:
        waited.clear()
        original_start = ex.api.exec_start

        def start(exec_id, *args, **kwargs):
            if kwargs.get("socket"):
                monkeypatch.setattr(http.client.HTTPResponse, "begin", begin_after_the_exit)
            try:
                return original_start(exec_id, *args, **kwargs)
            finally:
                monkeypatch.setattr(http.client.HTTPResponse, "begin", real_begin)

        monkeypatch.setattr(ex.api, "exec_start", start)
        try:
            return run(ex, cid, command)
        finally:
            monkeypatch.setattr(ex.api, "exec_start", original_start)

    assert run_once("echo err >&2") == {"timed_out": False, "output": "err\n", "returncode": 0}
    assert waited == [True]
    many = run_once("seq 1 3000; echo done >&2")
    assert many["output"] == "".join(f"{i}\n" for i in range(1, 3001)) + "done\n"


@pytest.mark.parametrize("init", [True, False])
def test_the_containers_own_process_started_after_the_command_survives(docker_client, base_image, init):
    """The container's own processes (its init's session) never die with a command, even one started after
    the command did. Why: the container's main process is forked by its init a moment after `start`
    answers, and on a loaded machine a command exec'd at once can start first; the kill then took that
    `sleep infinity` for the command's escapee and the container stopped (seen in side-by-side CI runs:
    409 on the next exec). Forced here: the main process starts only once the command made a file."""
    main = "until [ -e /tmp/go ]; do sleep 0.05; done; sleep infinity & wait"
    c = start_container(docker_client, ["sh", "-c", main], init=init)
    try:
        ex = DockerExecutor(docker_client)

        def main_started(tag: str) -> None:
            for _ in range(BOUND * 20):
                if "sleep infinity" in run(ex, c.id, "ps -eo args --no-headers")["output"]:
                    return
                threading.Event().wait(0.05)
            raise AssertionError("the container's main process never started")

        ex.before_kill = main_started
        res = run(ex, c.id, "touch /tmp/go; env -i setsid sleep 381 & sleep 300", timeout=1)
        ex.before_kill = None
        assert res["timed_out"] is True
        c.reload()
        assert c.status == "running"
        out = run(ex, c.id, "ps -eo args --no-headers")["output"]
        assert "sleep infinity" in out and "sleep 381" not in out and "sleep 300" not in out
    finally:
        c.remove(force=True)
