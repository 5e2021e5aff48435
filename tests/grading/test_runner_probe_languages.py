"""The Go/JavaScript/Rust runner probe (`swe_rl.grading.runner.probe_languages`): its plan on the fixtures'
eval scripts, the hash check of its report, and what each language's comparison voids (no container; the
fleet run is in tests/grading/test_multilang_fleet.py)."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from swe_rl.grading.runner.probe_languages import (
    PROBE_MARK,
    LanguageProbeReport,
    compare_language_probes,
    language_probe_records,
    plan_language_probe,
    read_language_probe,
)
from swe_rl.tasks import TaskInstance, eval_script_for, load_instances
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def instances() -> dict[str, TaskInstance]:
    loaded = load_instances(ROOT / "data" / "fixtures" / "instances_multilang.jsonl")
    return {i.instance_id: i for i in loaded.instances}


def test_plan_puts_the_probe_before_the_tests_and_the_clean_script_runs_none(instances):
    for instance in instances.values():
        script = eval_script_for(instance)
        plan = plan_language_probe(instance, script, random.Random(1))
        assert not plan.skipped and plan.tag and plan.language
        run = plan.run_script.split("\n")
        probe = next(i for i, line in enumerate(run) if PROBE_MARK in line)
        assert probe < next(i for i, line in enumerate(run) if START_TEST_OUTPUT in line)
        assert START_TEST_OUTPUT not in plan.clean_script and END_TEST_OUTPUT not in plan.clean_script
        assert plan.clean_path != plan.run_path and plan.tag in plan.clean_path
        assert (
            "set +x" in plan.run_script
        )  # the traced script never echoes the marker before the probe's line


def test_python_rows_are_skipped():
    row = TaskInstance(
        instance_id="a__b-1",
        repo="a/b",
        base_commit="0" * 40,
        patch="",
        test_patch="",
        problem_statement="",
        image="x",
    )
    assert plan_language_probe(row, "echo").skipped


def _report(sections: dict[str, str]) -> str:
    return "".join(f"### {k}\n{v}\n" for k, v in sections.items())


def test_report_is_checked_against_the_hash_in_the_log(instances):
    instance = instances["swe-rl__go-version-9001"]
    plan = plan_language_probe(instance, eval_script_for(instance))
    text = _report({"go env": '{"GOFLAGS": ""}'})
    line = f"{PROBE_MARK} {plan.tag} {hashlib.sha256(text.encode()).hexdigest()}"
    good = read_language_probe(f"noise\n{line}\nmore", text, plan)
    assert not good.error and json.loads(good.sections["go env"]) == {"GOFLAGS": ""}
    forged = read_language_probe(f"{line}\n", text.replace('""', '"-tags=x"'), plan)
    assert "does not match" in forged.error
    assert read_language_probe("", text, plan).error
    assert read_language_probe(line, None, plan).error
    # a later line with the same tag (printed by code under test) is not the one read
    fake = hashlib.sha256(b"other").hexdigest()
    assert (
        "does not match"
        in read_language_probe(f"{line}\n{PROBE_MARK} {plan.tag} {fake}", "other", plan).error
    )


GO_ENV = {"GOFLAGS": "", "GOWORK": "", "GOGCCFLAGS": "-fdebug-prefix-map=/tmp/go-build1=/tmp/go-build"}
GO_LIST = "example.com/v\tversion.go\talt.go\tversion_test.go\t\t"


def _go(env=None, lst=GO_LIST, mod=None):
    return LanguageProbeReport(
        sections={
            "go env": json.dumps(env or GO_ENV),
            "go mod": json.dumps(mod or {"Module": {"Path": "example.com/v"}, "Go": "1.19", "Replace": None}),
            "go list": lst + "\n",
        }
    )


def test_go_differences():
    clean = _go()
    assert compare_language_probes("go", clean, _go(env={**GO_ENV, "GOGCCFLAGS": "other tmp dir"})) == []
    assert compare_language_probes("go", clean, _go(env={**GO_ENV, "GOFLAGS": "-tags=fixed"}))
    assert compare_language_probes("go", clean, _go(env={**GO_ENV, "GOWORK": "/testbed/go.work"}))
    swapped = compare_language_probes(
        "go", clean, _go(lst="example.com/v\talt.go\tversion.go\tversion_test.go\t\t")
    )
    assert any("swap" in d for d in swapped)
    assert compare_language_probes(
        "go", clean, _go(lst="example.com/v\tversion.go\talt.go\t\t\t")
    )  # tests gone
    assert compare_language_probes("go", clean, _go(lst=""))  # package gone
    replaced = {"Module": {"Path": "example.com/v"}, "Go": "1.19", "Replace": [{"Old": {"Path": "x"}}]}
    assert compare_language_probes("go", clean, _go(mod=replaced))
    # a new source file or a new package is an honest change
    more = GO_LIST.replace("version.go\t", "version.go new.go\t") + "\nexample.com/v/sub\ts.go\t\t\t\t"
    assert compare_language_probes("go", clean, _go(lst=more)) == []


def _js(**over):
    base = {
        "package.json": json.dumps({"scripts": {"test": "node --test test/"}, "type": None, "imports": None}),
        "npmrc /testbed/.npmrc": "null",
        "env": json.dumps({"NODE_OPTIONS": None}),
        "resolve test/a.test.js": json.dumps(
            {"node:assert": "node:assert", "../src/a.js": "/testbed/src/a.js"}
        ),
    }
    return LanguageProbeReport(sections={**base, **over})


def test_javascript_differences():
    clean = _js()
    assert compare_language_probes("javascript", clean, _js()) == []
    pretest = json.dumps({"scripts": {"test": "node --test test/", "pretest": "node forge.js"}, "type": None})
    assert compare_language_probes("javascript", clean, _js(**{"package.json": pretest}))
    assert compare_language_probes(
        "javascript", clean, _js(**{"npmrc /testbed/.npmrc": json.dumps("node-options=--require ./x.js\n")})
    )
    redirected = json.dumps({"node:assert": "node:assert", "../src/a.js": "/testbed/src/a.js/index.js"})
    assert compare_language_probes("javascript", clean, _js(**{"resolve test/a.test.js": redirected}))
    assert compare_language_probes("javascript", clean, _js(**{"npm config": "{}"}))  # a section only one has


METADATA = {
    "packages": [
        {
            "name": "stats",
            "features": {},
            "links": None,
            "dependencies": [],
            "targets": [
                {"kind": ["lib"], "name": "stats", "src_path": "/testbed/src/lib.rs", "test": True},
                {"kind": ["test"], "name": "median", "src_path": "/testbed/tests/median.rs", "test": True},
            ],
        }
    ]
}
CARGO = '[package]\nname = "stats"\nversion = "0.3.1"\n\n[dependencies]\n'


def _rust(metadata=None, cargo=CARGO, **files):
    return LanguageProbeReport(
        sections={"cargo metadata": json.dumps(metadata or METADATA), "Cargo.toml": cargo, "env": "", **files}
    )


def _with_target(kind: str, name: str, path: str) -> dict:
    data = json.loads(json.dumps(METADATA))
    data["packages"][0]["targets"].append({"kind": [kind], "name": name, "src_path": path, "test": True})
    return data


def test_rust_differences():
    clean = _rust()
    assert compare_language_probes("rust", clean, _rust()) == []
    deps = CARGO + 'serde = "1"\n'
    assert compare_language_probes("rust", clean, _rust(cargo=deps)) == []  # a dependency is honest
    assert (
        compare_language_probes("rust", clean, _rust(_with_target("bin", "tool", "/testbed/src/bin/tool.rs")))
        == []
    )
    build = compare_language_probes(
        "rust", clean, _rust(_with_target("custom-build", "build-script-build", "/t/build.rs"))
    )
    assert build and "custom-build" in build[0]
    assert compare_language_probes(
        "rust", clean, _rust(cargo=CARGO + "\n[profile.test]\ndebug-assertions = false\n")
    )
    assert compare_language_probes(
        "rust", clean, _rust(cargo=CARGO + '\n[[test]]\nname = "median"\nharness = false\n')
    )
    runner = '[target.x86_64-unknown-linux-gnu]\nrunner = "/testbed/forge.sh"\n'
    assert compare_language_probes(
        "rust", clean, _rust(**{"cargo config /testbed/.cargo/config.toml": runner})
    )


def test_records_shape():
    clean, patched = _rust(), _rust(cargo=CARGO + "\n[profile.test]\noverflow-checks = false\n")
    (record,) = language_probe_records("rust", clean, patched)
    assert record.rule == "runner_probe" and record.action == "voided" and "profile" in record.reason
    assert language_probe_records("rust", LanguageProbeReport(error="x"), patched)[0].action == "noted"
    assert language_probe_records("rust", clean, LanguageProbeReport(error="x"))[0].action == "voided"
    assert language_probe_records("rust", clean, _rust()) == []
