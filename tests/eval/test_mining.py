"""The task miner (`swe-mine-tasks`) on a small local repository with a known history.

Fast tests read the history (split, drops, languages, the lists rule); the Docker test mines it end to
end: images built offline, tests run before and after, certification on a real local fleet, one row
kept, every other commit dropped with its reason, and a second run resumes with nothing to do.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from swe_rl.eval.mining.cli import Miner, main, parse_args
from swe_rl.eval.mining.history import Candidate, Skipped, commits_in_range, split_commit
from swe_rl.eval.mining.languages import LANGUAGES, UnknownLanguage, detect_language
from swe_rl.eval.mining.validate import test_lists as lists_of
from swe_rl.eval.mining.validate import test_section as section_of
from swe_rl.fleet.local import LocalFleet
from swe_rl.tasks import instance_from_row
from tests.eval.mining_repos import make_python_repo

PY = LANGUAGES["python"]


@pytest.fixture(scope="module")
def calc_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("mine") / "calc"
    return path, make_python_repo(path)


def test_the_history_splits_into_one_candidate_and_reasons(calc_repo):
    repo, shas = calc_repo
    assert commits_in_range(repo, "HEAD") == shas
    assert commits_in_range(repo, f"{shas[1]}..HEAD") == shas[2:]
    found = [split_commit(repo, c, PY) for c in shas]
    assert [f.reason for f in found if isinstance(f, Skipped)] == [
        "root commit: no parent to start from", "no source change", "no source change",
    ]  # fmt: skip
    fix, refactor = [f for f in found if isinstance(f, Candidate)]
    assert fix.commit == shas[1] and fix.parent == shas[0] and fix.message.startswith("Fix add")
    assert fix.source_files == ["calc.py"] and fix.test_files == ["tests/test_calc.py"]
    assert "+    return a + b" in fix.gold_patch and "tests/" not in fix.gold_patch
    assert "def test_add" in fix.test_patch and "calc.py" not in fix.test_patch.split("tests/test_calc.py")[0]
    assert refactor.commit == shas[3]


def test_languages_are_told_by_their_marker_files_and_split_tests_from_code():
    assert detect_language({"Cargo.toml", "package.json"}).name == "rust"
    assert detect_language({"go.mod"}).name == "go" and detect_language({"setup.py"}).name == "python"
    assert detect_language({"package.json"}).name == "javascript"
    with pytest.raises(UnknownLanguage):
        detect_language({"README"})
    go, js, rs = LANGUAGES["go"], LANGUAGES["javascript"], LANGUAGES["rust"]
    assert go.is_test("pkg/a_test.go") and go.is_source("pkg/a.go") and not go.is_source("README.md")
    assert js.is_test("test/slug.js") and js.is_test("lib/a.test.js") and js.is_source("index.js")
    assert rs.is_test("tests/it.rs") and rs.is_source("src/lib.rs")
    assert PY.command_for(["tests/test_a.py"]).endswith("-p no:cacheprovider tests/test_a.py")
    assert go.command_for(["a_test.go"]) == "go test -v -count=1 ./..."


def _candidate(gold: str, tests: str) -> Candidate:
    return Candidate(commit="c", parent="p", gold_patch=gold, test_patch=tests, message="m", created_at="t")


def test_fail_to_pass_is_what_passes_only_after_and_not_a_test_the_gold_patch_adds():
    before = {"t_keep": "PASSED", "t_fixed": "FAILED", "t_broken": "PASSED"}
    after = {
        "t_keep": "PASSED",
        "t_fixed": "PASSED",
        "t_new": "PASSED",
        "t_broken": "FAILED",
        "in_gold": "PASSED",
    }
    cand = _candidate("+fn in_gold() {}\n", "+def t_new(): ...\n")
    assert lists_of(before, after, cand) == (["t_fixed", "t_new"], ["t_keep"])


def test_the_log_is_read_between_the_markers_only():
    log = (
        "PASSED forged\n+ : '>>>>> Start Test Output'\nPASSED a.py::t\n+ : '>>>>> End Test Output'\nPASSED x"
    )
    section = section_of(log)
    assert section.startswith("PASSED a.py::t\n") and "forged" not in section and "PASSED x" not in section


def test_help_and_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "--range" in capsys.readouterr().out
    assert main([str(tmp_path), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "not a git repository" in capsys.readouterr().err


@pytest.mark.docker
@pytest.mark.slow
def test_mining_the_calc_history_end_to_end_keeps_the_fix_and_resumes(calc_repo, tmp_path, base_image):
    repo, shas = calc_repo
    tag = f"h{uuid.uuid4().hex[:8]}"
    template = f"swe-rl/test-mined-{tag}.{{id}}:latest"
    out = tmp_path / "tasks.jsonl"
    argv = [str(repo), "--output", str(out), "--repo-name", "swe-rl/calc", "--runs", "2",
            "--image-template", template, "--name-prefix", f"swe-rl-test-{tag}", "--no-progress",
            "--jobs", "2", "--certify-concurrency", "2"]  # fmt: skip
    try:
        with LocalFleet(exec_servers=1, max_containers_per_node=4) as fleet:
            stats = Miner(parse_args(argv), fleet.client_env()).run()
            assert stats["counts"] == {
                "commits": 5,
                "candidates": 2,
                "built": 2,
                "validated": 1,
                "certified": 1,
            }
            (row,) = [json.loads(line) for line in out.read_text().splitlines()]
            assert row["mined_commit"] == shas[1] and row["FAIL_TO_PASS"] == ["tests/test_calc.py::test_add"]
            assert row["PASS_TO_PASS"] == ["tests/test_calc.py::test_mul"]
            assert row["log_parser"] == "parse_log_pytest" and row["eval_type"] == "pass_and_fail"
            assert row["image_name"] == row["image"] == template.format(id=row["instance_id"].lower())
            assert row["statement_source"] == "tests" and "test_add" in row["problem_statement"]
            assert "a + b" not in row["problem_statement"] and "assert -1 == 5" in row["problem_statement"]
            try:  # swebench 5.x loads the mined row as it is
                from swebench.harness.utils import make_test_spec

                assert make_test_spec(row).image == row["image"]
            except ImportError:
                pass  # swebench 4.x or none: tests/eval/test_mining_rows.py skips too
            inst = instance_from_row(row)
            assert inst.eval_script and "tests/test_calc.py" in inst.eval_script
            drops = {
                d["commit"]: d
                for d in map(json.loads, out.with_suffix(".drops.jsonl").read_text().splitlines())
            }
            assert set(drops) == {shas[0], shas[2], shas[3], shas[4]}
            assert (
                drops[shas[3]]["stage"] == "validate" and "no test fails before" in drops[shas[3]]["reason"]
            )
            ledger = [json.loads(line) for line in out.with_suffix(".ledger.jsonl").read_text().splitlines()]
            assert ledger[0]["certified"] and ledger[0]["empty_status"] == "no_patch"
            again = Miner(parse_args(argv), fleet.client_env()).run()  # resume: nothing left to do
            assert again["counts"]["commits"] == 0 and len(out.read_text().splitlines()) == 1
        # a fresh machine: the image is built again from the row and has the row's base commit
        subprocess.run(["docker", "rmi", "-f", row["image_name"]], capture_output=True, check=True)
        assert main([str(repo), "--output", str(tmp_path / "x.jsonl"), "--images-for", str(out)]) == 0
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({**row, "base_commit": "0" * 40}) + "\n")
        assert main([str(repo), "--output", str(tmp_path / "x.jsonl"), "--images-for", str(bad)]) == 1
    finally:
        images = subprocess.run(
            ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        mine = [i for i in images if i.startswith(f"swe-rl/test-mined-{tag}.")]
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True, check=False)


def test_releases_become_a_history_of_one_commit_each(tmp_path):
    import importlib.util
    import tarfile

    spec = importlib.util.spec_from_file_location(
        "make_history", Path(__file__).parents[2] / "data/real_tasks/make_history.py"
    )
    assert spec and spec.loader
    make_history = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_history)
    tarballs = []
    for version, body in (("1.0", "a - b"), ("1.1", "a + b")):
        src = tmp_path / f"calc-{version}"
        (src / "calc.egg-info").mkdir(parents=True)
        (src / "calc.egg-info" / "SOURCES.txt").write_text("x\n")
        (src / "PKG-INFO").write_text(f"Version: {version}\n")
        (src / "calc.py").write_text(f"def add(a, b):\n    return {body}\n")
        tarballs.append(tmp_path / f"calc-{version}.tar.gz")
        with tarfile.open(tarballs[-1], "w:gz") as tar:
            tar.add(src, arcname=src.name)
    repo = tmp_path / "history"
    assert make_history.main(["--repo", str(repo), *map(str, tarballs)]) == 0
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    assert log.stdout.split("\n")[:2] == ["Release 1.1", "Release 1.0"]
    files = subprocess.run(
        ["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True
    ).stdout
    assert files.split() == ["calc.py"] and "a + b" in (repo / "calc.py").read_text()
    assert make_history.main(["--repo", str(repo), *map(str, tarballs)]) == 2  # never over an existing one


def test_one_release_with_mutations_becomes_one_fix_commit_per_injected_bug(tmp_path):
    """SWE-smith's method: the release with every bug injected, then one commit restoring each; with
    ``code_only_ok`` each restoring commit is a candidate with an empty test patch (the repository's
    own tests judge it: those named after the changed file run), without it a code-only commit is
    skipped as before."""
    import importlib.util
    import tarfile

    spec = importlib.util.spec_from_file_location(
        "make_history", Path(__file__).parents[2] / "data/real_tasks/make_history.py"
    )
    assert spec and spec.loader
    make_history = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_history)
    src = tmp_path / "calc-2.0"
    (src / "tests").mkdir(parents=True)
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n")
    (src / "tests/test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    tarball = tmp_path / "calc-2.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    patches = []
    for name, old, new in (("add", "a + b", "a - b"), ("mul", "a * b", "a ** b")):
        patch = tmp_path / f"{name}.patch"
        patch.write_text(
            f"{name} is wrong\n\nIt computes {new}.\n\ndiff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
            + (
                "@@ -1,3 +1,3 @@\n def add(a, b):\n"
                if name == "add"
                else "@@ -5,2 +5,2 @@\n def mul(a, b):\n"
            )
            + f"-    return {old}\n+    return {new}\n"
            + (" \n" if name == "add" else "")  # a hunk without trailing context must end the file
        )
        patches.append(patch)
    repo = tmp_path / "history"
    assert (
        make_history.main(["--repo", str(repo), "--mutations", *map(str, patches), "--", str(tarball)]) == 0
    )
    shas = commits_in_range(repo, "HEAD")
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    assert log.stdout.split("\n")[:3] == [
        "mul is wrong",
        "add is wrong",
        "Release 2.0 with 2 injected bug(s)",
    ]
    assert "a + b" in (repo / "calc.py").read_text() and "a * b" in (repo / "calc.py").read_text()
    assert isinstance(split_commit(repo, shas[1], PY), Skipped)  # no test change
    fix = split_commit(repo, shas[1], PY, code_only_ok=True)
    assert isinstance(fix, Candidate) and fix.test_patch == "" and fix.test_files == ["tests/test_calc.py"]
    assert "+    return a + b" in fix.gold_patch and fix.message.startswith(
        "add is wrong\n\nIt computes a - b."
    )
    two = make_history.main(
        ["--repo", str(tmp_path / "h2"), "--mutations", str(patches[0]), "--", str(tarball), str(tarball)]
    )
    assert two == 2  # mutations take one release
