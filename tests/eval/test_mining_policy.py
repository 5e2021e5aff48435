"""The miner's SWE-bench-like row policy (issue 49, item 3): every rule drops with its reason, or flags."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from swe_rl.eval.mining.cli import Miner, parse_args
from swe_rl.eval.mining.history import Candidate, commits_in_range, split_commit
from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.eval.mining.policy import RowPolicy, added_blocks, after_validation, before_build, copied_from

JS = LANGUAGES["javascript"]
ROOT = Path(__file__).resolve().parents[2]

VERSION_BUGGY = "export default function version(uuid) {\n  return parseInt(uuid.slice(15, 16), 16);\n}\n"
VERSION_FIXED = "export default function version(uuid) {\n  return parseInt(uuid.slice(14, 15), 16);\n}\n"
CJS_FIXED = VERSION_FIXED.replace("export default function", "function") + "exports.default = version;\n"


def _repo(path: Path, history: list[tuple[str, dict[str, str]]]) -> list[str]:
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000"}  # fmt: skip

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], env=env, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q", "-b", "main")
    for message, files in history:
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", message)
    return commits_in_range(path, "HEAD")


def _two_builds(tmp_path: Path) -> tuple[Path, list[str]]:
    """A package shipping two builds of one file: the ESM one broken, the CommonJS one right."""
    return tmp_path / "uuid", _repo(
        tmp_path / "uuid",
        [
            ("import", {"package.json": "{}\n", "dist/esm/version.js": VERSION_BUGGY,
                        "dist/cjs/version.js": CJS_FIXED, "dist/esm/test/version.test.js": "// t\n"}),
            ("fix version()", {"dist/esm/version.js": VERSION_FIXED}),
            ("fix and add", {"dist/esm/version.js": VERSION_FIXED.replace("}\n", "}\nexport const aLongNewName = 1;\n")}),
        ],
    )  # fmt: skip


def test_a_fix_that_another_build_of_the_file_holds_is_copyable(tmp_path):
    repo, shas = _two_builds(tmp_path)
    fix = split_commit(repo, shas[1], JS, code_only_ok=True)
    assert isinstance(fix, Candidate)
    assert added_blocks(fix.gold_patch) == [
        ("dist/esm/version.js", ["return parseInt(uuid.slice(14, 15), 16);"])
    ]
    assert copied_from(repo, fix) == "dist/cjs/version.js"
    (reason,) = before_build(repo, fix, RowPolicy())
    assert reason.startswith("copyable fix") and "dist/cjs/version.js" in reason
    assert before_build(repo, fix, RowPolicy(drop_copyable=False)) == []
    # a fix whose new lines are not all elsewhere is not copyable
    more = split_commit(repo, shas[2], JS, code_only_ok=True)
    assert isinstance(more, Candidate) and copied_from(repo, more) is None


def test_release_sized_diffs_are_dropped_by_files_lines_and_tests():
    gold = "".join(
        f"diff --git a/m{i}.py b/m{i}.py\n--- a/m{i}.py\n+++ b/m{i}.py\n@@ -1 +1 @@\n-a = {i}\n+a = {i + 1}\n"
        for i in range(3)
    )
    cand = Candidate("c", "p", gold, "", "m", "t", source_files=["m0.py", "m1.py", "m2.py"])
    assert before_build(Path("."), cand, RowPolicy(drop_copyable=False)) == []
    reasons = before_build(Path("."), cand, RowPolicy(max_files=2, max_lines=5, drop_copyable=False))
    assert reasons == [
        "release-sized: the gold patch touches 3 files (max 2)",
        "release-sized: the gold patch changes 6 lines (max 5)",
    ]
    before = {"t.py::a": "FAILED", "t.py::keep": "PASSED"}
    f2p = [f"t.py::t{i}" for i in range(4)]
    assert after_validation(f2p, ["t.py::keep"], before, RowPolicy()) == []
    assert after_validation(f2p, ["t.py::keep"], before, RowPolicy(max_fail_to_pass=3)) == [
        "release-sized: 4 FAIL_TO_PASS tests (max 3)"
    ]


def test_fail_to_pass_of_a_file_that_failed_to_import_and_rows_without_pass_to_pass():
    policy = RowPolicy()
    # the whole file failed at collection before the fix: 20 tests "fixed" by a new name existing
    f2p = [f"tests/test_new.py::test_{i}" for i in range(20)]
    before = {"tests/test_new.py": "ERROR", "tests/test_old.py::test_x": "PASSED"}
    (reason,) = after_validation(f2p, ["tests/test_old.py::test_x"], before, policy)
    assert reason.startswith("import failure") and "tests/test_new.py" in reason
    # one test of the file ran before (and failed): a behaviour, not an import
    before["tests/test_new.py::test_0"] = "FAILED"
    assert after_validation(f2p, ["tests/test_old.py::test_x"], before, policy) == []
    # runners whose ids name no file: nothing ran at all before
    assert after_validation(["TestA"], ["TestB"], {}, policy)[0].startswith(
        "import failure: every FAIL_TO_PASS test is in the whole run"
    )
    assert after_validation(["TestA"], ["TestB"], {"TestB": "PASSED"}, policy) == []
    assert after_validation(["TestA"], [], {"TestA": "FAILED"}, policy) == [
        "no PASS_TO_PASS: nothing guards against a fix that breaks what worked"
    ]
    assert after_validation(["TestA"], [], {"TestA": "FAILED"}, RowPolicy(require_pass_to_pass=False)) == []


def test_the_miner_writes_the_policy_reason_to_its_drops_file_or_flags_the_row(tmp_path):
    repo, shas = _two_builds(tmp_path)
    out = tmp_path / "out" / "tasks.jsonl"
    out.parent.mkdir()
    miner = Miner(parse_args([str(repo), "--output", str(out), "--code-only-ok", "--no-progress"]))
    assert miner.split(shas[1]) is None
    (drop,) = [json.loads(line) for line in out.with_suffix(".drops.jsonl").read_text().splitlines()]
    assert drop["stage"] == "policy" and drop["commit"] == shas[1] and "copyable fix" in drop["reason"]
    flagged = Miner(
        parse_args([str(repo), "--output", str(tmp_path / "f.jsonl"), "--code-only-ok", "--flag-only"])
    )
    kept = flagged.split(shas[1])
    assert kept is not None and kept[3][0].startswith("copyable fix")


def test_what_the_policy_says_of_the_committed_real_rows():
    """The bundled set predates the policy: two of the three release rows are release-sized (10.1.0's:
    3 files, 82 lines, 4 tests, is not), uuid's version() row has no PASS_TO_PASS (and both uuid rows
    are copyable from dist/cjs, which needs their image's tree to see)."""
    rows = {
        json.loads(line)["instance_id"]: json.loads(line)
        for line in (ROOT / "data/real_tasks/instances.jsonl").read_text().splitlines()
    }
    judged = {
        iid: after_validation(r["FAIL_TO_PASS"], r["PASS_TO_PASS"], {t: "PASSED" for t in r["PASS_TO_PASS"]} | {t: "FAILED" for t in r["FAIL_TO_PASS"]}, RowPolicy())
        + before_build(Path("."), Candidate("c", "p", r["patch"], "", "", "", source_files=[""] * r["patch"].count("diff --git")), RowPolicy(drop_copyable=False))
        for iid, r in rows.items()
    }  # fmt: skip
    dropped = sorted(iid for iid, reasons in judged.items() if reasons)
    assert dropped == [
        "more-itertools__more-itertools-54e7bf053f",
        "more-itertools__more-itertools-c9e45b1957",
        "uuidjs__uuid-32e386da92",
    ], {k: v for k, v in judged.items() if v}


def test_candidates_are_built_and_validated_by_jobs_threads_at_once(tmp_path, monkeypatch):
    """Item 5: ``--jobs 2`` runs two candidates' build-and-validate at the same time. A barrier of two
    parties stands in for Docker (fast tier): one at a time, the first would wait for the second
    forever (the barrier's timeout breaks it and the test fails)."""
    import threading

    from swe_rl.eval.mining import cli
    from swe_rl.eval.mining.validate import NoFailToPass, Validation
    from tests.eval.mining_repos import make_python_repo

    repo = tmp_path / "calc"
    shas = make_python_repo(repo)
    barrier = threading.Barrier(2, timeout=120)

    def build(repo, parent, language, image, iid, *, timeout, env=None):
        barrier.wait()
        return "0" * 40

    def validate(language, cand, image, base, *, name_prefix, timeout):
        if cand.commit != shas[1]:
            raise NoFailToPass("no test fails before the gold patch and passes after it")
        f2p, p2p = ["tests/test_calc.py::test_add"], ["tests/test_calc.py::test_mul"]
        before = {p2p[0]: "PASSED", f2p[0]: "FAILED"}
        return Validation(before=before, after={}, fail_to_pass=f2p, pass_to_pass=p2p, logs={"before": ""})

    monkeypatch.setattr(cli, "build_task_image", build)
    monkeypatch.setattr(cli, "validate", validate)
    out = tmp_path / "tasks.jsonl"
    args = [str(repo), "--output", str(out), "--no-certify", "--no-progress", "--jobs", "2"]
    stats = Miner(parse_args(args)).run()
    assert stats["counts"] == {"commits": 5, "candidates": 2, "built": 2, "validated": 1, "certified": 0}
    assert stats["jobs"] == 2 and not barrier.broken
    (row,) = [json.loads(line) for line in out.with_suffix(".validated.jsonl").read_text().splitlines()]
    assert row["mined_commit"] == shas[1] and row["statement_source"] == "tests"
    assert cli.main([str(repo), "--output", str(out), "--jobs", "0"]) == 2
