"""The eval's progress bar: every frame it draws shows status counts that add up to its counter."""

from __future__ import annotations

import io
import os
import pty
import re

from swe_rl.eval.progress import StatusBar

FRAME = re.compile(r"(\d+)/(\d+) \[[^\]]*?((?:[a-z_]+=\d+ ?)+)\]")


def frames(text: str) -> list[tuple[int, dict[str, int]]]:
    """(counter, status counts) of every frame drawn with counts."""
    out = []
    for part in re.split(r"[\r\n]", text):
        m = FRAME.search(part)
        if m:
            counts = {k: int(v) for k, v in (kv.split("=") for kv in m.group(3).split())}
            out.append((int(m.group(1)), counts))
    return out


def test_the_counts_never_run_ahead_of_the_counter():
    sink = io.StringIO()
    bar = StatusBar(4, disabled=False, file=sink, use_tqdm=True)
    for status in ["resolved", "resolved", "unresolved", "resolved"]:
        bar.update(status)
    bar.close()
    drawn = frames(sink.getvalue())
    assert drawn, sink.getvalue()
    for counter, counts in drawn:
        assert sum(counts.values()) == counter, (counter, counts, sink.getvalue())
    assert drawn[-1] == (4, {"resolved": 3, "unresolved": 1})


def test_without_a_bar_one_line_per_instance(capsys):
    bar = StatusBar(2, disabled=False, file=None, use_tqdm=False)
    bar.update("resolved")
    bar.update("env_error")
    bar.close()
    assert capsys.readouterr().out.splitlines() == ["[1/2] resolved=1", "[2/2] env_error=1 resolved=1"]


def test_disabled_draws_nothing_but_still_counts(capsys):
    bar = StatusBar(1, disabled=True)
    bar.update("no_patch")
    bar.close()
    assert capsys.readouterr().out == "" and bar.counts == {"no_patch": 1}


def test_a_log_file_or_pipe_gets_plain_lines_not_carriage_returns(tmp_path):
    """Not a terminal (a file, a pipe): one plain line per instance, never a bar's \\r frames."""
    with (tmp_path / "eval.log").open("w") as log:
        bar = StatusBar(3, disabled=False, file=log)
        for status in ["resolved", "unresolved", "resolved"]:
            bar.update(status)
        bar.close()
    text = (tmp_path / "eval.log").read_text()
    assert "\r" not in text
    assert text.splitlines() == [
        "[1/3] resolved=1",
        "[2/3] resolved=1 unresolved=1",
        "[3/3] resolved=2 unresolved=1",
    ]
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        bar = StatusBar(1, disabled=False, file=pipe)
        bar.update("no_patch")
        bar.close()
    with os.fdopen(r) as out:
        assert out.read() == "[1/1] no_patch=1\n"


def test_a_terminal_gets_the_bar():
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        bar = StatusBar(1, disabled=False, file=tty)
        assert bar.bar is not None
        bar.update("resolved")
        bar.close()
    os.close(master)
