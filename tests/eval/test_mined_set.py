"""The mined set (data/mined_tasks/): real commit-level tasks of real upstream repositories (issue 49, item 6).

Fast: what the committed files say of themselves. Every row is a commit of a repository of
sources.tsv with a gold patch and a test patch (no release diff, no injected bug), FAIL_TO_PASS and
PASS_TO_PASS both non-empty, within the row policy's limits, and a statement that passes the leak
check; every drop of the ledger has its stage and reason; the stats script's tables and the
collector behave. The rows' loading in swebench 5.x is tests/eval/test_mining_rows.py's; their
grading in containers is tests/grading/test_mined_tasks.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.eval.mining.policy import RowPolicy
from swe_rl.eval.mining.statements import leaks

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "data/mined_tasks"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(SET))

import collect  # noqa: E402 - data/mined_tasks/collect.py
import mined_set_stats as stats  # noqa: E402 - bench/mined_set_stats.py


def _read(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


ROWS = _read(SET / "instances.jsonl")
DROPS = _read(SET / "drops.jsonl")
SOURCES = {  # the repositories of sources.tsv and of releases.tsv (release-anchored rows)
    line.split("\t")[1]: line.split("\t")
    for tsv in ("sources.tsv", "releases.tsv")
    for line in (SET / tsv).read_text().splitlines()
    if line.strip() and not line.startswith("#")
}


def _list(value: str | list[str]) -> list[str]:
    return json.loads(value) if isinstance(value, str) else value


def test_the_set_is_real_commits_of_several_repositories_and_languages():
    repos = {r["repo"] for r in ROWS}
    assert len(ROWS) >= 50 and len(repos) >= 8, (len(ROWS), sorted(repos))
    assert len({r["language"] for r in ROWS}) >= 3
    assert repos <= set(SOURCES), repos - set(SOURCES)
    assert len({r["instance_id"] for r in ROWS}) == len(ROWS)
    for row in ROWS:
        # a commit with its own tests, not an injected bug judged by the tests already there
        assert row["patch"].strip() and row["test_patch"].strip(), row["instance_id"]
        assert len(row["mined_commit"]) == 40 and len(row["base_commit"]) == 40
        assert row["image"] == row["image_name"] == f"swe-rl/mined.{row['instance_id']}:latest"
        assert "provenance" not in row or "SWE-smith" not in row["provenance"]


def test_the_rows_of_repositories_mined_with_dependencies_name_their_environment():
    """A row of a ``--with-deps`` line of sources.tsv carries the environment image its task image is
    built on (build.sh makes it again and refuses a row whose environment it would not make); the
    others run on the toolchain images and carry none."""
    with_deps = {repo for repo, line in SOURCES.items() if "--with-deps" in line[3].split()}
    env_rows = [r for r in ROWS if r.get("env_image")]
    for row in ROWS:
        if row["repo"] in with_deps:
            slug = row["repo"].lower().replace("/", "__")
            assert row.get("env_image", "").startswith(f"swe-rl/env.{slug}:"), row["instance_id"]
        else:
            assert not row.get("env_image"), row["instance_id"]
    # issue 49: real dependency environments in the set, of several repositories, Node's among them
    assert len(env_rows) >= 20 and len({r["repo"] for r in env_rows}) >= 3, len(env_rows)
    assert {"python", "javascript"} <= {r["language"] for r in env_rows}


def test_every_row_is_within_the_row_policy():
    policy = RowPolicy()
    for row in ROWS:
        f2p, p2p = _list(row["FAIL_TO_PASS"]), _list(row["PASS_TO_PASS"])
        lines, files = stats.patch_size(row["patch"])
        assert f2p and p2p, row["instance_id"]
        assert not set(f2p) & set(p2p), row["instance_id"]
        assert len(f2p) <= policy.max_fail_to_pass and files <= policy.max_files, row["instance_id"]
        assert lines <= policy.max_lines, row["instance_id"]
        assert not row.get("policy_flags"), row["instance_id"]


def test_every_statement_passes_the_leak_check_and_says_nothing_of_how_it_was_made():
    for row in ROWS:
        known = row["test_patch"] + "\n" + "\n".join(_list(row["FAIL_TO_PASS"]))
        assert not leaks(row["problem_statement"], row["patch"], known=known), row["instance_id"]
        text = row["problem_statement"].lower()
        assert "swe-smith" not in text and "gold patch" not in text and "mined" not in text.split(), row[
            "instance_id"
        ]


def test_every_drop_has_its_repository_stage_and_reason():
    assert DROPS
    for drop in DROPS:
        assert drop["repo"] in SOURCES and drop["stage"] in stats.STAGES and drop["reason"].strip(), drop
    certified = {r["mined_commit"] for r in ROWS}
    assert not certified & {d["commit"] for d in DROPS}  # a commit is certified or dropped, not both


def test_the_stats_give_the_yield_of_every_repository_and_the_distributions():
    counts = stats.yield_per_repo(ROWS, DROPS)
    assert set(counts) == {r["repo"] for r in ROWS} | {d["repo"] for d in DROPS}
    assert sum(c["certified"] for c in counts.values()) == len(ROWS)
    text = stats.report(ROWS, DROPS, markdown=True)
    assert f"mined set ({len(ROWS)})" in text and "32.8 / 5888" in text and "429 of 500" in text
    for block in text.split("\n\n")[
        :2
    ]:  # the yield table, the distributions: each line has the header's cells
        assert len({ln.count(" | ") for ln in block.splitlines() if ln.startswith("| ")}) == 1, block


def test_the_tables_of_docs_datasets_are_the_sets():
    doc = (ROOT / "docs/datasets.md").read_text()
    pending = {r["repo"]: r["pending"] for r in _read(SET / "runs.jsonl")}
    assert stats.with_tables(doc, stats.report(ROWS, DROPS, markdown=True, pending=pending)) == doc
    with pytest.raises(ValueError, match="markers"):
        stats.with_tables("no markers here", "t")


def test_patch_size_and_distribution_on_known_input():
    patch = (
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n y = 3\n"
        "diff --git a/b.py b/b.py\n--- a/b.py\n+++ b/b.py\n@@ -1 +1,2 @@\n z\n+w\n"
    )
    assert stats.patch_size(patch) == (3, 2)
    assert stats.distribution([1, 2, 3, 4, 100]) == {"mean": 22.0, "median": 3, "p90": 100, "max": 100}
    assert stats.distribution([]) == {"mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0}


def test_the_stats_script_refuses_an_empty_set(tmp_path):
    (tmp_path / "instances.jsonl").write_text("")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/mined_set_stats.py"), "--rows", str(tmp_path / "instances.jsonl")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "no rows" in proc.stderr


PATCH = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n d = {}\n+tally_helper = d\n"


def _row(ident: str, repo: str, statement: str) -> dict:
    return {"instance_id": ident, "repo": repo, "mined_commit": ident, "patch": PATCH, "test_patch": "",
            "FAIL_TO_PASS": ["t.py::test_a"], "problem_statement": statement}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--rows", "/nonexistent/rows.jsonl"], "--rows needs a file of rows"), (["no+such"], "is not a name")],
)
def test_build_sh_refuses_a_missing_rows_file_and_an_unknown_name_before_any_work(args, said):
    proc = subprocess.run(["bash", str(SET / "build.sh"), *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and said in proc.stderr, proc.stderr


def _miner_output(root: Path, name: str, repo: str, rows: int, drops: int, leaking: int = 0) -> None:
    out = root / name
    out.mkdir(parents=True)
    ident = repo.replace("/", "__")
    made = [_row(f"{ident}-{i}", repo, "test_a fails") for i in range(rows)]
    made += [_row(f"{ident}-L{i}", repo, "call `tally_helper`") for i in range(leaking)]
    (out / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))
    (out / "tasks.drops.jsonl").write_text(
        "".join(
            json.dumps({"commit": f"c{i}", "instance_id": f"{ident}-d{i}", "stage": "split", "reason": "r"})
            + "\n"
            for i in range(drops)
        )
    )
    (out / "tasks.stats.json").write_text(json.dumps({"certified": rows}))


def test_collect_merges_one_repository_and_keeps_the_others(tmp_path):
    mined, set_dir = tmp_path / "mined", tmp_path / "set"
    set_dir.mkdir()
    _miner_output(mined, "a+x", "a/x", rows=2, drops=1, leaking=1)
    _miner_output(mined, "b+y", "b/y", rows=0, drops=3)  # no row: the drops say which repository
    assert collect.collect(set_dir, mined, ["a+x", "b+y"]) == {"a/x": 2, "b/y": 0}
    leaked = [d for d in _read(set_dir / "drops.jsonl") if d["instance_id"] == "a__x-L0"]
    assert leaked and leaked[0]["stage"] == "policy" and "tally_helper" in leaked[0]["reason"]
    assert "a__x-L0" not in {r["instance_id"] for r in _read(set_dir / "instances.jsonl")}
    _miner_output(tmp_path / "again", "a+x", "a/x", rows=1, drops=0)
    collect.collect(set_dir, tmp_path / "again", ["a+x"])
    assert [r["repo"] for r in _read(set_dir / "instances.jsonl")] == ["a/x"]
    assert {d["repo"] for d in _read(set_dir / "drops.jsonl")} == {"b/y"}
    assert {r["repo"] for r in _read(set_dir / "runs.jsonl")} == {"a/x", "b/y"}
    (mined / "c+z").mkdir()
    (mined / "c+z/tasks.validated.jsonl").write_text(json.dumps(_row("c__z-1", "c/z", "s")) + "\n")
    (mined / "c+z/tasks.drops.jsonl").write_text(
        json.dumps({"commit": "c0", "instance_id": "c__z-0", "stage": "split", "reason": "r"}) + "\n"
    )
    collect.collect(set_dir, mined, ["c+z"])  # a run cut before certification: its validated row is pending
    assert [r["pending"] for r in _read(set_dir / "runs.jsonl") if r["repo"] == "c/z"] == [1]


def test_collect_keeps_a_repositorys_release_rows_and_history_rows_apart(tmp_path):
    mined, set_dir = tmp_path / "mined", tmp_path / "set"
    set_dir.mkdir()
    _miner_output(mined, "a+x", "a/x", rows=2, drops=1)
    _miner_output(mined, "x@1.0", "a/x", rows=1, drops=1)
    done = collect.collect(set_dir, mined, ["a+x", "x@1.0"], {"x@1.0": "x==1.0"})
    assert done == {"a/x": 2, "x==1.0": 1}
    released = [r for r in _read(set_dir / "instances.jsonl") if r.get("release") == "x==1.0"]
    assert len(released) == 1 and len(_read(set_dir / "instances.jsonl")) == 3
    _miner_output(tmp_path / "again", "a+x", "a/x", rows=1, drops=0)  # the history mined again
    collect.collect(set_dir, tmp_path / "again", ["a+x"])
    assert sorted(r.get("release", "") for r in _read(set_dir / "instances.jsonl")) == ["", "x==1.0"]
    assert [d.get("release") for d in _read(set_dir / "drops.jsonl")] == ["x==1.0"]
    _miner_output(tmp_path / "third", "x@1.0", "a/x", rows=0, drops=2)  # the release mined again
    collect.main(
        ["--set", str(set_dir), "--mined", str(tmp_path / "third"), "--release", "x@1.0=x==1.0", "x@1.0"]
    )
    assert [r.get("release") for r in _read(set_dir / "instances.jsonl")] == [None]
    assert [r.get("release") for r in _read(set_dir / "runs.jsonl")] == [None, "x==1.0"]


def test_collect_settles_what_a_cut_runs_ledger_decided(tmp_path):
    out = tmp_path / "mined/c+z"
    out.mkdir(parents=True)
    validated = [_row(f"c__z-{i}", "c/z", "test_a fails") for i in range(4)]
    (out / "tasks.validated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in validated))
    ledger = [{"instance_id": "c__z-0", "certified": True, "env_error": False, "reason": ""},
              {"instance_id": "c__z-1", "certified": False, "env_error": False, "reason": "gold not resolved"},
              {"instance_id": "c__z-2", "certified": False, "env_error": True, "reason": "fleet down"}]  # fmt: skip
    (out / "tasks.ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ledger))
    (tmp_path / "set").mkdir()
    assert collect.collect(tmp_path / "set", tmp_path / "mined", ["c+z"]) == {"c/z": 1}
    assert [r["instance_id"] for r in _read(tmp_path / "set/instances.jsonl")] == ["c__z-0"]
    drops = _read(tmp_path / "set/drops.jsonl")
    assert [(d["instance_id"], d["stage"], d["reason"]) for d in drops] == [
        ("c__z-1", "certify", "gold not resolved")
    ]
    assert _read(tmp_path / "set/runs.jsonl")[0]["pending"] == 2  # a fleet failure and no verdict yet


def test_collect_refuses_a_name_without_output(tmp_path):
    with pytest.raises(SystemExit) as exc:
        collect.main(["--set", str(tmp_path), "--mined", str(tmp_path), "nothing+here"])
    assert exc.value.code == 2
