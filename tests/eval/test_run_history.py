"""runs.jsonl: one row per invocation; the summary's wall time is the sum; --no-resume starts over."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys

import pytest

from swe_rl.eval.clean_stop import CleanStop, command_line, resume_line
from swe_rl.eval.run_history import RunHistory, read_runs, summary_fields


def test_runs_add_up_and_a_torn_line_is_skipped(tmp_path):
    assert summary_fields(tmp_path, 1.5) == {"wall_seconds": 1.5, "runs": [], "interrupted": None}
    h = RunHistory(tmp_path)
    h.begin("python eval/eval_swe.py --data x")
    first = h.end(finished=2, interrupted="SIGINT")
    with (tmp_path / "runs.jsonl").open("a") as fh:
        fh.write('{"started": "torn')
    (tmp_path / "runs.jsonl").write_text((tmp_path / "runs.jsonl").read_text() + "\n")
    h2 = RunHistory(tmp_path)
    h2.begin()
    second = h2.end(finished=3)
    fields = summary_fields(tmp_path, 99.0)
    assert [r["finished"] for r in fields["runs"]] == [2, 3] and fields["interrupted"] is None
    assert fields["wall_seconds"] == round(first["wall_seconds"] + second["wall_seconds"], 3)
    assert first["command"] == "python eval/eval_swe.py --data x"
    RunHistory(tmp_path, fresh=True)  # --no-resume: a new history
    assert read_runs(tmp_path) == []


def test_stop_cancels_running_work_and_skips_the_rest():
    async def main():
        stop = CleanStop()
        done = []

        async def work(i, seconds):
            await asyncio.sleep(seconds)
            done.append(i)
            return i

        asyncio.get_running_loop().call_later(0.3, stop.request, "SIGINT")  # as a signal handler would
        results = await stop.run_all([work(0, 0.01), work(1, 30), work(2, 30)])
        late = await stop.run_all([work(3, 0)])  # nothing new starts after a stop
        return stop, done, results, late

    stop, done, results, late = asyncio.run(main())
    assert stop.signal_name == "SIGINT" and done == [0] and results == [0] and late == []


def test_resume_line_is_one_line_with_the_command():
    line = resume_line("SIGTERM", 3, 10, command_line("swe_rl.eval.eval_swe", ["--data", "a b.jsonl"]))
    assert line == (
        "interrupted (SIGTERM): 3 of 10 instances finished; run the same command again to resume: "
        f"{shlex.quote(sys.executable)} -m swe_rl.eval.eval_swe --data 'a b.jsonl'"
    )


@pytest.mark.slow  # a fresh interpreter imports the eval
def test_the_resume_command_runs_with_the_interpreter_that_ran():
    """The hint names sys.executable (a bare `python` may be another interpreter without this package)."""
    words = shlex.split(command_line("swe_rl.eval.eval_swe", ["--help"]))
    assert words[0] == sys.executable and words[1:3] == ["-m", "swe_rl.eval.eval_swe"]
    p = subprocess.run(words, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0 and "--limit" in p.stdout
