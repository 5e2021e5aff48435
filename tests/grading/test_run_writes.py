"""Files the test run writes (`swe_rl.grading.scans.run_writes`): the marker and listing run by real bash around a
test command that writes modules (one with a back-dated mtime), and the records the scan makes of them."""

from __future__ import annotations

import hashlib
import random
import shlex
import subprocess

from swe_rl.grading.scans.run_writes import (
    BUNDLE_MARK,
    WRITES_MARK,
    WrittenFiles,
    bundle_from_log,
    plan_writes,
    read_listing,
    unpack_bundle,
    written_records,
    written_sources_wanted,
)
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

RUN = """\
mkdir -p pkg/__pycache__ .pytest_cache
printf 'import os\\n' > pkg/_generated.py
printf 'x = 1\\n' > pkg/old.py && touch -d '2001-01-01' pkg/old.py
printf 'junk' > pkg/__pycache__/mod.cpython-311.pyc
printf 'junk' > .pytest_cache/v
printf 'import pkg._generated\\n' > extra.pth
printf 'data' > out.txt
"""


def _script(run: str) -> str:
    return (
        f"#!/bin/bash\nset -uxo pipefail\n: '{START_TEST_OUTPUT}'\n{run}\n: '{END_TEST_OUTPUT}'\necho after\n"
    )


def test_listing_finds_what_the_run_wrote_and_skips_artefacts(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "before.py").write_text("y = 2\n")  # there before the run: not listed
    plan = plan_writes(_script(RUN), str(repo), python=False, rng=random.Random(3))
    assert not plan.skipped
    try:
        done = subprocess.run(
            ["bash", "-c", plan.script], cwd=repo, capture_output=True, text=True, timeout=60
        )
        log = done.stdout + done.stderr
        text = open(plan.listing).read()
    finally:
        subprocess.run(["rm", "-rf", f"/tmp/.swe-rl-writes-{plan.tag}"], check=True)
    written = read_listing(log, text, plan)
    assert not written.error, written.error
    rel = sorted(p.removeprefix(f"{repo}/") for p in written.paths)
    assert rel == [
        "extra.pth",
        "out.txt",
        "pkg/_generated.py",
        "pkg/old.py",
    ]  # back-dated mtime: ctime is new
    wanted = written_sources_wanted(written, str(repo), {"pkg/old.py"})
    assert sorted(p.removeprefix(f"{repo}/") for p in wanted) == ["extra.pth", "pkg/_generated.py"]
    assert log.count(WRITES_MARK) == 1  # tracing off: the line is printed once


def test_listing_must_match_the_hash_in_the_log():
    plan = plan_writes(_script("true"), "/testbed", python=True)
    good = "/testbed/a.py\n"
    line = f"{WRITES_MARK} {plan.tag} {hashlib.sha256(good.encode()).hexdigest()}"
    assert read_listing(line, good, plan).paths == ["/testbed/a.py"]
    assert read_listing(line, "", plan).error
    assert read_listing("", good, plan).error
    assert "sys.path" in plan.script and "python3 -c" in plan.script


def test_a_known_import_path_is_written_down_not_asked(tmp_path):
    """With the clean run's import path (the probe plugin's), no interpreter starts before the test
    command, and a file the run writes there is listed as one written in the repository is."""
    repo, site = tmp_path / "repo", tmp_path / "site packages"
    repo.mkdir()
    site.mkdir()
    # (a test command's first write comes after its interpreter started, not in the mark's clock tick)
    run = f"sleep 0.05; printf 'import os\\n' > {shlex.quote(str(site))}/injected.pth"
    plan = plan_writes(_script(run), str(repo), python=True, rng=random.Random(4), import_path=[str(site)])
    assert "python -c" not in plan.script and "python3 -c" not in plan.script
    try:
        done = subprocess.run(
            ["bash", "-c", plan.script], cwd=repo, capture_output=True, text=True, timeout=60
        )
        text = open(plan.listing).read()
    finally:
        subprocess.run(["rm", "-rf", f"/tmp/.swe-rl-writes-{plan.tag}"], check=True)
    written = read_listing(done.stdout + done.stderr, text, plan)
    assert not written.error and written.paths == [f"{site}/injected.pth"]
    asked = plan_writes(_script(run), str(repo), python=True, rng=random.Random(4))
    assert "python3 -c" in asked.script  # not known: asked, as before


def test_records():
    files = {
        "/testbed/pkg/_gen.py": (None, b"import os\nexec(os.environ['X'])\n"),
        "/testbed/pkg/plain.py": (None, b"def f():\n    return 1\n"),
        "/usr/lib/python3/dist-packages/zz.pth": (None, b"import os\n"),
        "/testbed/conftest.py": (None, b"x = 1\n"),
        "/testbed/pkg/mod.py": (b"exec(input())\n", b"exec(input())\nY = 2\n"),  # its old capability: not new
        "/testbed/gone.py": (None, None),
    }
    records = written_records("/testbed", files)
    voided = {(r.path, r.action) for r in records if r.action == "voided"}
    assert ("pkg/_gen.py", "voided") in voided
    assert ("/usr/lib/python3/dist-packages/zz.pth", "voided") in voided
    assert ("conftest.py", "voided") in voided
    assert not any(r.path in ("pkg/plain.py", "pkg/mod.py") for r in records), records
    assert any(r.path == "gone.py" and r.action == "noted" for r in records)
    assert all(r.rule == "run_written_file" for r in records)
    assert written_records("/testbed", {}) == []
    assert WrittenFiles().paths == []


def test_the_listing_and_the_reports_come_back_in_one_bundle(tmp_path):
    """The reports the grader reads after the run are copied with the listing into one file (read in one
    call): each part exactly its file's bytes, the listing still matching its hash in the log, a report
    that is not there None, a part that is not base64 None (as an unreadable file)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    report, missing = tmp_path / "report", tmp_path / "gone"
    raw = b'{"a": 1}\n\xff\xfe not utf-8\n--x--\n'
    run = f"printf 'x = 1\\n' > mod.py\nprintf '%b' '{raw.decode('latin-1').encode('unicode_escape').decode()}' > {report}"
    plan = plan_writes(
        _script(run), str(repo), python=False, rng=random.Random(5), carry=[str(report), str(missing)]
    )
    try:
        done = subprocess.run(
            ["bash", "-c", plan.script], cwd=repo, capture_output=True, text=True, timeout=60
        )
        bundle = open(plan.bundle, "rb").read().decode("utf-8", "surrogateescape")
    finally:
        subprocess.run(["rm", "-rf", f"/tmp/.swe-rl-writes-{plan.tag}"], check=True)
    parts = unpack_bundle(bundle, plan)
    assert set(parts) == {plan.listing, str(report), str(missing)}
    assert parts[str(report)] is not None and parts[str(report)].encode("utf-8", "surrogateescape") == raw
    assert parts[str(missing)] is None
    written = read_listing(done.stdout + done.stderr, parts[plan.listing], plan)
    assert not written.error and [p.removeprefix(f"{repo}/") for p in written.paths] == ["mod.py"]
    forged = bundle.replace(bundle.split("\n")[3], "not base64 !!")  # the report's part
    assert unpack_bundle(forged, plan)[str(report)] is None
    printed, log = bundle_from_log(done.stdout, plan)  # the same bundle, printed into the log
    assert printed == bundle and BUNDLE_MARK not in log and f"{WRITES_MARK} {plan.tag} " in log


def test_the_bundle_printed_last_is_the_one_read_and_leaves_the_log():
    """The run's own output may print a bundle of its own (before the grader's lines, the run's processes
    being gone by then): the last whole one counts; a log cut before its end line holds none."""
    from swe_rl.grading.scans.run_writes import WritesPlan

    plan = WritesPlan(script="", tag="a" * 16, listing="/w/list", bundle="/w/bundle")
    head, foot = f"{BUNDLE_MARK} {plan.tag} begin\n", f"{BUNDLE_MARK} {plan.tag} end\n"
    forged, real = "--aaaaaaaaaaaaaaaa-0--\nZm9yZ2Vk\n", "--aaaaaaaaaaaaaaaa-0--\nL3IvYS5weQo=\n"
    log = f"test output\n{head}{forged}{foot}more\n{head}{real}{foot}tail\n"
    printed, rest = bundle_from_log(log, plan)
    assert printed == real and rest == f"test output\n{head}{forged}{foot}more\ntail\n"
    assert unpack_bundle(printed, plan) == {"/w/list": "/r/a.py\n"}
    assert bundle_from_log(f"out\n{head}{real}", plan) == (None, f"out\n{head}{real}")  # cut: no end
    assert bundle_from_log(f"out{head}{real}{foot}", plan)[0] is None  # not at a line's start
    assert bundle_from_log(log, plan.model_copy(update={"tag": "b" * 16}))[0] is None  # another tag


async def test_after_the_run_one_read_serves_every_file_the_bundle_holds():
    """The pipeline reads the bundle once; without it (the script stopped before it, or a file too large
    for one read) each file is read on its own, as before."""
    import base64

    from swe_rl.fleet.errors import BadRequest, FileNotFound
    from swe_rl.grading.after_run import after_run_reader
    from swe_rl.grading.scans.run_writes import WritesPlan

    plan = WritesPlan(script="", tag="t" * 16, listing="/w/list", bundle="/w/bundle", carried=["/w/report"])
    files = {"/w/list": b"/repo/a.py\n", "/w/report": b"signed\n", "/w/other": b"x"}

    class Lease:
        def __init__(self, bundle: object) -> None:
            self.bundle, self.reads = bundle, []

        async def read_file(self, path: str) -> bytes:
            self.reads.append(path)
            if path == "/w/bundle":
                if isinstance(self.bundle, Exception):
                    raise self.bundle
                return self.bundle  # type: ignore[return-value]
            if path not in files:
                raise FileNotFound("no such file", status=404)
            return files[path]

    packed = "".join(
        f"--{'t' * 16}-{i}--\n{base64.b64encode(files[p]).decode()}\n"
        for i, p in enumerate(["/w/list", "/w/report"])
    )
    lease = Lease(packed.encode())
    read = await after_run_reader(lease, plan)  # type: ignore[arg-type]
    assert [await read(p) for p in ("/w/list", "/w/report", "/w/other", "/w/none")] == [
        "/repo/a.py\n",
        "signed\n",
        "x",
        None,
    ]
    assert lease.reads == ["/w/bundle", "/w/other", "/w/none"]  # the bundle's files: no read of their own
    lease = Lease(FileNotFound("never read", status=404))
    read = await after_run_reader(lease, plan, packed)  # type: ignore[arg-type]
    assert [await read(p) for p in ("/w/list", "/w/report")] == ["/repo/a.py\n", "signed\n"]
    assert lease.reads == []  # printed into the log: no container call after the run
    for failure in (FileNotFound("gone", status=404), BadRequest("too large", status=413)):
        lease = Lease(failure)
        read = await after_run_reader(lease, plan)  # type: ignore[arg-type]
        assert [await read(p) for p in ("/w/list", "/w/report")] == ["/repo/a.py\n", "signed\n"]
        assert lease.reads == ["/w/bundle", "/w/list", "/w/report"]


def test_a_log_the_fleet_cut_gives_no_printed_bundle():
    """The fleet keeps a long log's head and tail: a begin line the run printed before the cut could pair
    with the grader's end line after it, so a cut log's bundle is read from its file instead; a whole log's
    bundle is taken out of the log."""
    from swe_rl.fleet.client import EvalResult
    from swe_rl.grading.after_run import printed_bundle
    from swe_rl.grading.scans.run_writes import WritesPlan

    plan = WritesPlan(script="", tag="c" * 16, listing="/w/list", bundle="/w/bundle")
    head, foot = f"{BUNDLE_MARK} {plan.tag} begin\n", f"{BUNDLE_MARK} {plan.tag} end\n"
    log = f"out\n{head}--cccccccccccccccc-0--\nL2EucHkK\n{foot}"

    def run(truncated: bool) -> EvalResult:
        return EvalResult("applied", "git", "", 0, log, False, truncated, 1.0)

    whole = run(False)
    assert printed_bundle(whole, plan) == "--cccccccccccccccc-0--\nL2EucHkK\n" and whole.test_log == "out\n"
    cut = run(True)
    assert printed_bundle(cut, plan) is None and cut.test_log == log
