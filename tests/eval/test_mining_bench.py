"""bench/mining_bench.py (issue 49, item 5): its repository gives one candidate per fix commit, each with
FAIL_TO_PASS and PASS_TO_PASS to be, and its last line has the documented shape. The bench itself
(Docker, a local fleet, minutes) is run by hand; its figure is in docs/datasets.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swe_rl.eval.mining.history import Candidate, Skipped, commits_in_range, split_commit
from swe_rl.eval.mining.languages import LANGUAGES

BENCH = Path(__file__).parents[2] / "bench"
LINE = re.compile(
    r"^mining: (\d+) candidates → (\d+) built → (\d+) validated → (\d+) certified in [\d.]+ min "
    r"\([\d.]+ s per candidate at concurrency \d+\)$"
)


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import mining_bench

    return mining_bench


def test_the_bench_repository_has_one_candidate_per_fix(bench, tmp_path):
    bench.make_repo(tmp_path / "ops", 3)
    found = [
        split_commit(tmp_path / "ops", c, LANGUAGES["python"])
        for c in commits_in_range(tmp_path / "ops", "HEAD")
    ]
    assert [type(f) for f in found] == [Skipped, Candidate, Candidate, Candidate, Skipped]
    last = found[3]
    assert (
        isinstance(last, Candidate)
        and "def test_mul" in last.test_patch
        and "+    return a * b" in last.gold_patch
    )


def test_the_last_line_has_the_documented_shape(bench):
    counts = {"candidates": 3, "built": 3, "validated": 3, "certified": 2}
    line = bench.summary_line(counts, 102.0, 2)
    assert (
        line
        == "mining: 3 candidates → 3 built → 3 validated → 2 certified in 1.7 min (34.0 s per candidate at concurrency 2)"
    )
    assert LINE.match(line)
    with pytest.raises(SystemExit):
        bench.main(["--candidates", "0"])
