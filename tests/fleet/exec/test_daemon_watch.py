"""`DaemonWatch` without Docker: calls run on a worker, a hang (pings unanswered in a row) ends the wait
of a call in flight at once and refuses new ones, an answered ping lifts it."""

from __future__ import annotations

import threading

import pytest

from swe_rl.fleet.exec.daemon_watch import DaemonNotAnswering, DaemonWatch

BOUND = 60.0


def test_a_call_returns_its_value_and_its_error():
    watch = DaemonWatch(workers=2)
    try:
        assert watch.call(lambda: 41 + 1) == 42
        with pytest.raises(ZeroDivisionError):
            watch.call(lambda: 1 / 0)
    finally:
        watch.close()


def test_one_unanswered_ping_is_not_a_hang_two_are_and_an_answer_lifts_it():
    watch = DaemonWatch(workers=1)
    try:
        watch.saw_ping(False)
        assert not watch.hung and watch.call(lambda: "ran") == "ran"
        watch.saw_ping(True)
        watch.saw_ping(False)
        assert not watch.hung  # the count starts again after an answer
        watch.saw_ping(False)
        assert watch.hung
        ran = []
        with pytest.raises(DaemonNotAnswering):
            watch.call(lambda: ran.append(1))
        assert ran == []  # refused without calling the daemon
        watch.saw_ping(True)
        assert watch.call(lambda: "again") == "again"
    finally:
        watch.close()


def test_a_call_in_flight_when_the_daemon_hangs_fails_at_once():
    watch = DaemonWatch(workers=2)
    stuck = threading.Event()
    release = threading.Event()

    def hung_call() -> str:
        stuck.set()
        release.wait(BOUND)
        return "late"

    outcome: list[BaseException | str] = []

    def caller() -> None:
        try:
            outcome.append(watch.call(hung_call))
        except DaemonNotAnswering as exc:
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    try:
        thread.start()
        assert stuck.wait(BOUND)
        watch.saw_ping(False)
        watch.saw_ping(False)
        thread.join(BOUND)
        # the caller came back while the call itself is still stuck (release not set yet)
        assert not thread.is_alive() and not release.is_set()
        assert isinstance(outcome[0], DaemonNotAnswering) and "may have run" in str(outcome[0])
    finally:
        release.set()
        thread.join(BOUND)
        watch.close()


def test_a_call_made_inside_a_call_runs_in_place():
    watch = DaemonWatch(workers=1)  # one worker: a nested submit would wait for itself forever
    try:
        assert watch.call(lambda: watch.call(lambda: threading.current_thread().name)).startswith(
            "swe-docker"
        )
    finally:
        watch.close()
