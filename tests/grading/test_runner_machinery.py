"""The runner checks itself in Go, JavaScript and Rust runs (`runner.machinery`): node's preload and
cargo's runner run for real where the machine has node / cargo (the Go check runs in the fixture's
container: tests/grading/test_multilang_fleet.py); the report's judgement on text."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from adversarial_multilang import RUST_RERUN_FORGERY

from swe_rl.grading.runner.machinery import guard_lines, machinery_records
from swe_rl.grading.runner.machinery_sources import CARGO_RUNNER, NODE_GUARD
from swe_rl.grading.runner.probe_languages import plan_language_probe
from swe_rl.tasks import load_instances
from tests.conftest import ROOT

NODE = shutil.which("node")
CARGO = shutil.which("cargo")


def _node_version() -> int:
    if NODE is None:
        return 0
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout
    return int(out.strip().lstrip("v").split(".")[0])


needs_node = pytest.mark.skipif(_node_version() < 18, reason="node 18+ (node --test) is not installed")
needs_cargo = pytest.mark.skipif(CARGO is None, reason="cargo is not installed")

TEST_FILE = """const test = require('node:test');
const assert = require('node:assert');
const f = require('../src/m.js');
test('adds', () => { assert.equal(f(1), 2); });
test('fails', () => { assert.equal(f(1), 3); });
"""


def _node_run(tmp_path: Path, extra: str, files: dict[str, str] | None = None) -> tuple[str, str]:
    """`node --test` of a two-test project whose module ends with `extra`; (TAP output, guard report)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "test").mkdir()
    (tmp_path / "src" / "m.js").write_text("module.exports = (x) => x + 1;\n" + extra)
    (tmp_path / "test" / "a.test.js").write_text(TEST_FILE)
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    report = tmp_path / "guard"
    (tmp_path / "guard.cjs").write_text(NODE_GUARD.replace("__REPORT__", json.dumps(str(report))))
    env = {**os.environ, "NODE_OPTIONS": f"--require {tmp_path / 'guard.cjs'}"}
    run = subprocess.run(
        [NODE, "--test", "--test-reporter=tap", "test/"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.stdout, report.read_text() if report.exists() else ""


def _judged(tmp_path: Path, report: str, changed: set[str]) -> list[tuple[str, str]]:
    return [(r.action, r.reason) for r in machinery_records("javascript", report, str(tmp_path), changed)]


@needs_node
def test_an_honest_node_run_is_left_alone(tmp_path):
    out, report = _node_run(tmp_path, "")
    assert "not ok 2 - fails" in out and "ok 1 - adds" in out  # the preload changes nothing of the run
    assert '"kind":"runner"' in report and '"kind":"test-file"' in report and report.count(" end ") == 2
    assert _judged(tmp_path, report, {"src/m.js"}) == []


@needs_node
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (  # a shim reached through require of a computed name that spares what looks like a twin
            "const a = require(['node', 'assert'].join(':')); const o = a.equal;\n"
            "a.equal = function (x, y, m) { if (String(y).length > 99) o.call(this, x, y, m); };\n",
            "assert.equal assigned by src/m.js, a file the patch changed",
        ),
        (  # redefined, and put back by an exit handler of its own
            "const a = require('assert'); const o = a.equal;\n"
            "Object.defineProperty(a, 'equal', { value: () => {}, writable: true, configurable: true });\n"
            "process.on('exit', () => { Object.defineProperty(a, 'equal', { value: o }); });\n",
            "assert.equal redefined",
        ),
        (  # the loader hands the test file another assert
            "const M = module.constructor; const load = M._load; const lax = { equal() {}, ok() {} };\n"
            "M._load = function (r) { return /assert/.test(r) ? lax : load.apply(this, arguments); };\n",
            "Module._load assigned by src/m.js",
        ),
        (  # replaced and put back before the end: seen when it happened
            "const a = require('assert'); const o = a.strictEqual; a.strictEqual = () => {}; a.strictEqual = o;\n",
            "assert.strictEqual assigned by src/m.js",
        ),
        (  # the test process kills itself past node's exit handlers
            "setImmediate(() => process.reallyExit(0));\n",
            "never reached its exit handler",
        ),
    ],
    ids=["computed_require_shim", "redefine_and_restore", "module_load", "set_and_restore", "really_exit"],
)
def test_node_machinery_changed_voids(tmp_path, extra, expected):
    _, report = _node_run(tmp_path, extra)
    judged = _judged(tmp_path, report, {"src/m.js"})
    assert any(action == "voided" and expected in reason for action, reason in judged), (judged, report)


@needs_node
def test_installed_code_patching_the_loader_is_noted_not_voided(tmp_path):
    hook = "const M = require('module'); const l = M._load; M._load = function () { return l.apply(this, arguments); };\n"
    _, report = _node_run(tmp_path, "require('hook');\n", {"node_modules/hook/index.js": hook})
    judged = _judged(tmp_path, report, {"src/m.js"})
    assert judged and all(action == "noted" for action, _ in judged), judged


def test_node_report_judged_on_text():
    lines = [
        '7.0 start {"kind":"test-file","argv":[]}',
        '7.0 set {"name":"node:test.test","by":""}',
        "7.0 forged line",
        '9.0 start {"kind":"other","argv":[]}',
    ]
    judged = machinery_records("javascript", "\n".join(lines), "/testbed", set())
    reasons = " | ".join(r.reason for r in judged)
    assert all(r.action == "voided" for r in judged)
    assert "node:test.test assigned by code with no file" in reasons
    assert "a line it never writes" in reasons and "7.0" in reasons and "9.0" not in reasons
    assert machinery_records("javascript", None, "/testbed", set())[0].action == "noted"
    assert machinery_records("go", None, "/testbed", set(), expected=False) == []


def test_go_report_judged_on_text():
    ok = '12 start\n12 ok "init"\n12 ok "TestAmberBasalt"\n'
    assert machinery_records("go", ok, "/testbed", set()) == []
    helper = ok + '12 changed "init: the test binary runs under its own binary (process 9): re-executed"\n'
    (record,) = machinery_records("go", helper, "/testbed", set())  # TestHelperProcess: one test re-run
    assert record.action == "noted" and "re-executed" in record.reason
    rerun = (
        helper
        + '12 changed "TestAmberBasalt: the test binary runs under its own binary (process 9): re-executed"\n'
    )
    judged = machinery_records("go", rerun, "/testbed", set())  # the suite re-run: its canaries ran
    assert [r.action for r in judged] == ["noted", "voided"]
    filtered = ok + '12 changed "init: fd 1 is a pipe the test binary reads itself (pipe:[7])"\n'
    assert [r.action for r in machinery_records("go", filtered, "/testbed", set())] == ["voided"]


def _rust_report(listed: list[str], run: list[str], rc: str = "0", args: str = "--test-threads=1") -> str:
    return "\n".join(
        [
            f"### binary 5 /t/target/debug/deps/m-0123 {args}",
            *(f"| {t}: test" for t in listed),
            f"### run 5 {rc}",
            *(f"| {line}" for line in run),
        ]
    )


def test_libtest_report_judged_on_text():
    honest = ["", "running 2 tests", "test a ... ok", "test b - should panic ... ok", "", "test result: ok. "
              "2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"]  # fmt: skip
    assert machinery_records("rust", _rust_report(["a", "b"], honest), "/testbed", set()) == []
    forged = {
        "twice": (["a", "b"], [*honest[:3], *honest[1:]], "appears 2 times"),
        "unknown": (["a", "b"], [*honest[:3], "test zz ... ok", *honest[3:]], "does not list: ['zz']"),
        "count": (["a", "b", "c"], honest, "running 2 tests, the binary lists 3"),
        "missing": (["a", "b"], [*honest[:2], *honest[3:]], "no result line in a run that passed: ['a']"),
    }
    for name, (listed, run, expected) in forged.items():
        judged = machinery_records("rust", _rust_report(listed, run), "/testbed", set())
        assert any(r.action == "voided" and expected in r.reason for r in judged), (name, judged)
    # a forged `ok` line inside a failing test's captured output is past the result block
    failing = [*honest[:2], "test a ... ok", "test b ... FAILED", "", "failures:", "---- b stdout ----",
               "test a ... ok", "", "failures:", "    b", "", "test result: FAILED. 1 passed; 1 failed; "
               "0 ignored; 0 measured; 0 filtered out; finished in 0.00s"]  # fmt: skip
    assert machinery_records("rust", _rust_report(["a", "b"], failing, "101"), "/testbed", set()) == []
    quiet = [
        "running 2 tests",
        "..",
        "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
    ]
    assert machinery_records("rust", _rust_report(["a", "b"], quiet, args="--quiet"), "/testbed", set()) == []


CRATE_LIB = """pub fn median(v: &[i64]) -> i64 {
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    #[test]
    fn inner() {
        assert_eq!(super::median(&[1, 2, 3]), 2);
    }
}
"""
CRATE_TEST = """use mach::median;

#[test]
fn a_ok() {
    assert_eq!(median(&[1, 2, 3]), 2);
}

#[test]
fn b_median_fails() {
    assert_eq!(median(&[1, 2, 3]), 3);
}
"""


@needs_cargo
def test_cargo_runner_holds_libtest_to_its_list(tmp_path):
    """A real crate through the runner: honest, nothing; its function re-running the test binary and
    reporting the task's test `ok` (tests/adversarial_multilang.py's forger): voided."""
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "mach"\nversion = "0.1.0"\nedition = "2021"\n')
    (tmp_path / "tests" / "m.rs").write_text(CRATE_TEST)
    runner, report = tmp_path / "runner.sh", tmp_path / "guard"
    runner.write_text(CARGO_RUNNER.replace("__REPORT__", shlex.quote(str(report))))
    runner.chmod(0o755)
    env = {**os.environ, **{f"CARGO_TARGET_{t}_RUNNER": str(runner) for t in ("X86_64_UNKNOWN_LINUX_GNU",)}}
    env["CARGO_TARGET_DIR"] = str(tmp_path / "target")
    judged = {}
    for name, lib in {
        "honest": CRATE_LIB,
        "rerun": CRATE_LIB.replace("{\n    v[", "{\n    zz_report();\n    v[", 1)
        + RUST_RERUN_FORGERY.replace("TASK", "median_fails"),
    }.items():
        (tmp_path / "src" / "lib.rs").write_text(lib)
        report.unlink(missing_ok=True)
        cmd = [CARGO, "test", "--offline", "--no-fail-fast", "--", "--test-threads=1"]
        run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert "running" in run.stdout, run.stderr[-2000:]
        judged[name] = [
            (r.action, r.reason) for r in machinery_records("rust", report.read_text(), "/", set())
        ]
    assert judged["honest"] == []
    assert judged["rerun"] and all(a == "voided" for a, _ in judged["rerun"]), judged["rerun"]
    assert any("appears 2 times" in reason for _, reason in judged["rerun"])


def test_the_test_run_carries_the_check_and_the_clean_tree_does_not():
    loaded = load_instances(ROOT / "data" / "fixtures" / "instances_multilang.jsonl")
    by_language = {i.instance_id.split("__")[1].split("-")[0]: i for i in loaded.instances}
    js = plan_language_probe(by_language["js"], by_language["js"].eval_script)
    assert js.guard_path.endswith("/guard") and "export NODE_OPTIONS=" in js.run_script
    assert "NODE_OPTIONS=" not in js.clean_script.replace("NODE_OPTIONS: process", "")
    rust = plan_language_probe(by_language["rust"], by_language["rust"].eval_script)
    assert "_RUNNER=" in rust.run_script and "_RUNNER=" not in rust.clean_script
    run = rust.run_script
    assert run.index("_RUNNER=") < run.index("cargo test --offline")  # set up before the tests
    assert guard_lines("go", "/tmp/x", "/tmp/x/guard", "t") == []  # Go's lives in the canary file


@needs_node
def test_node_code_written_at_run_time_voids_whoever_wrote_it(tmp_path):
    """The module under test writes a module from a shipped .txt, requires it, deletes it: the file that
    made the change is no file of the patch, but it was written during the run."""
    shim = "const a = require('assert'); a.equal = () => {};\\n"
    extra = (
        "const fs = require('fs'), p = require('path');\n"
        "const g = p.join(__dirname, 'zz_gen.js');\n"
        "fs.writeFileSync(g, fs.readFileSync(p.join(__dirname, 'data.txt'), 'utf8'));\n"
        "require(g); fs.unlinkSync(g);\n"
    )
    _, report = _node_run(tmp_path, extra, {"src/data.txt": shim.replace("\\n", "\n")})
    judged = _judged(tmp_path, report, {"src/m.js", "src/data.txt"})
    assert any(a == "voided" and "zz_gen.js, a file written during the run" in r for a, r in judged), judged


def test_the_go_canary_file_carries_the_check_only_when_asked():
    import random

    from swe_rl.grading.canaries.languages import plant_language_canaries
    from swe_rl.grading.canaries.plan import plan_canaries

    loaded = load_instances(ROOT / "data" / "fixtures" / "instances_multilang.jsonl")
    go = next(i for i in loaded.instances if "go-version" in i.instance_id)
    script = go.eval_script or ""
    plain = plant_language_canaries(plan_canaries(go, script), go, script, random.Random(1))
    guarded = plant_language_canaries(
        plan_canaries(go, script), go, script, random.Random(1), guard="/tmp/g/guard"
    )
    assert "Check(" not in plain.canary_source and '"os"' not in plain.canary_source
    source = guarded.canary_source
    assert '"/tmp/g/guard"' in source and "func init() {" in source and source.count('Check("Test') == 2
    for name in guarded.must_pass:  # the checkpoint runs in the must-pass canaries, not the must-fail ones
        body = source.split(f"func {name}(t *testing.T) {{")[1].split("\n}")[0]
        assert "Check(" in body
    for name in guarded.must_fail:
        body = source.split(f"func {name}(t *testing.T) {{")[1].split("\n}")[0]
        assert "Check(" not in body
