"""The eval's progress bar: every frame it draws shows status counts that add up to its counter."""

from __future__ import annotations

import io
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
    bar = StatusBar(4, disabled=False, file=sink)
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
