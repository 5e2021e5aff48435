"""A validation run whose container never started is run once more (`validate.run_started`, no Docker)."""

from __future__ import annotations

from swe_rl.eval.mining import validate
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

STARTED = f"+ : '{START_TEST_OUTPUT}'\ntests/test_t.py::test_double PASSED\n+ : '{END_TEST_OUTPUT}'\n"
DAEMON_ERROR = "docker: Error response from daemon: failed to create task for container: context canceled.\n"


def _runs(monkeypatch, answers: list[str]) -> list[str]:
    asked: list[str] = []

    def run_script(image, script, *, name_prefix, timeout):
        asked.append(image)
        return answers[len(asked) - 1]

    monkeypatch.setattr(validate, "run_script", run_script)
    return asked


def test_a_run_that_never_started_is_run_once_more(monkeypatch):
    asked = _runs(monkeypatch, [DAEMON_ERROR, STARTED])
    assert validate.run_started("img", "script", name_prefix="p", timeout=1) == STARTED
    assert len(asked) == 2


def test_a_run_that_started_is_run_once(monkeypatch):
    asked = _runs(monkeypatch, [STARTED, STARTED])
    assert validate.run_started("img", "script", name_prefix="p", timeout=1) == STARTED
    assert len(asked) == 1


def test_a_run_that_never_starts_is_given_up_after_the_second(monkeypatch):
    asked = _runs(monkeypatch, [DAEMON_ERROR, DAEMON_ERROR, STARTED])
    assert validate.run_started("img", "script", name_prefix="p", timeout=1) == DAEMON_ERROR
    assert len(asked) == 2
