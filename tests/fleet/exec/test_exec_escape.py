"""A command's timeout kills every process it started, also those that left its session and cleared
their environment, while a command running beside it on the same container survives (real Docker)."""

from __future__ import annotations

import threading
import time

from tests.conftest import BASE_IMAGE

ESCAPES = (
    "env -i setsid sleep 305 & "  # new session, no marker variable
    "( ( sleep 306 & ) & ) ; "  # double fork: reparented to init
    "nohup sleep 307 >/dev/null 2>&1 & "  # nohup
    "sleep 308 & disown ; "  # disown
    "setsid env -i sh -c '(sleep 309 &); sleep 310' & "  # double fork after leaving the session
    "env -i setsid sh -c 'exec setsid sleep 311 </dev/null >/dev/null 2>&1' & "
    "SWE_RL_EXEC_TAG=forged setsid sleep 312 & "  # a forged marker protects nothing
    "env -i SWE_RL_EXEC_TAG=kill-x setsid sleep 313 & "
    "echo started; sleep 300"
)


def run(srv, cid: str, command: str, **kw) -> dict:
    r = srv.post("/container/exec", {"container_id": cid, "command": command, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def sleeps(srv, cid: str) -> list[str]:
    out = run(srv, cid, "ps -eo args --no-headers", timeout=30)["output"]
    return sorted(line for line in out.splitlines() if line.startswith("sleep ") and line != "sleep infinity")


def test_timeout_kills_escaped_processes_but_not_a_concurrent_command(exec_server):
    srv = exec_server
    cid = srv.post("/container/create", {"image": BASE_IMAGE}).json()["container_id"]
    # left running by an earlier command that finished: not the timed-out command's to kill
    assert run(srv, cid, "env -i setsid sleep 401 >/dev/null 2>&1 & echo ok")["output"] == "ok\n"
    time.sleep(0.3)
    beside: dict = {}
    worker = threading.Thread(
        target=lambda: beside.update(run(srv, cid, "sleep 5; echo survived", timeout=60))
    )
    worker.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    res = run(srv, cid, ESCAPES, timeout=2)
    assert res["timed_out"] is True and res["returncode"] == 124 and "started" in res["output"]
    assert time.monotonic() - t0 < 15
    left = sleeps(srv, cid)
    assert not [s for s in left if s.startswith(("sleep 30", "sleep 31"))], left
    worker.join(60)
    assert beside.get("output") == "survived\n" and beside.get("returncode") == 0, beside
    assert "sleep 401" in left  # present before the command: untouched
    assert run(srv, cid, "echo still usable")["output"] == "still usable\n"


def test_two_timeouts_at_once_each_clean_up(exec_server):
    srv = exec_server
    cid = srv.post("/container/create", {"image": BASE_IMAGE}).json()["container_id"]
    results: list[dict] = []
    cmds = ["env -i setsid sleep 321 & sleep 300", "( (env -i sleep 322 &) & ); sleep 300"]
    threads = [
        threading.Thread(target=lambda c=c: results.append(run(srv, cid, c, timeout=1.5))) for c in cmds
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r["timed_out"] for r in results] == [True, True]
    assert sleeps(srv, cid) == [], sleeps(srv, cid)


def test_escape_of_a_command_run_as_another_user_is_killed(exec_server):
    srv = exec_server
    cid = srv.post("/container/create", {"image": BASE_IMAGE}).json()["container_id"]
    res = run(srv, cid, "env -i setsid sleep 331 & sleep 300", timeout=1.5, user="nobody")
    assert res["timed_out"] is True
    assert sleeps(srv, cid) == []
