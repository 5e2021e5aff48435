"""The tree rules of Go, JavaScript and Rust instances (`swe_rl.grading.scans.tree_languages`) on hand-made
canonical patches: which paths are test files, start-up hooks or vendored code, and which manifest
changes touch the runner's settings (parsed, so a dependency bump is not one). Graded end to end with
real exploits in tests/grading/test_multilang_fleet.py."""

from __future__ import annotations

import json

import pytest

from swe_rl.grading.languages import LANGUAGES, language_of
from swe_rl.grading.patch.canonical import CanonicalPatch, TreeChange
from swe_rl.grading.scans.tree_languages import language_rule, manifest_settings
from swe_rl.tasks.rows import instance_from_row
from tests.conftest import ROOT

BY_NAME = {lang.name: lang for lang in LANGUAGES}


def _rule(language: str, path: str, before: str | None = None, after: str | None = "x", gold=()):
    kind = "added" if before is None else "deleted" if after is None else "modified"
    blobs = {}
    old = new = "0" * 40
    if before is not None:
        old, blobs[old.replace("0", "1")] = old.replace("0", "1"), before.encode()
    if after is not None:
        new, blobs[new.replace("0", "2")] = new.replace("0", "2"), after.encode()
    change = TreeChange(path=path, kind=kind, old_blob=old, new_blob=new)
    hit = language_rule(change, CanonicalPatch(applied=True, blobs=blobs), BY_NAME[language], set(gold))
    return hit[0] if hit else None


@pytest.mark.parametrize(
    ("language", "path", "rule"),
    [
        ("go", "pkg/zz_main_test.go", "test_file"),
        ("go", "pkg/testdata/golden.txt", "test_dir"),
        ("go", "go.work", "start_up_hook"),
        ("go", "vendor/github.com/stretchr/testify/assert/assertions.go", "dependency_code"),
        ("go", "pkg/version.go", None),
        ("go", "pkg/Version_TEST.GO", "test_file"),  # names are compared case-folded
        ("javascript", "src/util.test.ts", "test_file"),
        ("javascript", "src/util.spec.mjs", "test_file"),
        ("javascript", "src/__tests__/util.js", "test_dir"),
        ("javascript", "__mocks__/fs.js", "test_dir"),
        ("javascript", "src/__snapshots__/a.js.snap", "test_file"),
        ("javascript", "jest.config.js", "start_up_hook"),
        ("javascript", ".mocharc.yml", "start_up_hook"),
        ("javascript", "babel.config.json", "start_up_hook"),
        ("javascript", ".npmrc", "start_up_hook"),
        ("javascript", "node_modules/jest/bin/jest.js", "dependency_code"),
        ("javascript", "src/slugify.js", None),
        ("rust", "build.rs", "start_up_hook"),
        ("rust", ".cargo/config.toml", "start_up_hook"),
        ("rust", "rust-toolchain.toml", "start_up_hook"),
        ("rust", "src/parser/tests.rs", "test_file"),
        ("rust", "src/lib.rs", None),
    ],
)
def test_paths(language, path, rule):
    assert _rule(language, path) == rule


def test_vendored_code_the_gold_patch_changes_is_kept():
    path = "vendor/example.com/dep/dep.go"
    assert _rule("go", path, before="a", after="b", gold={path}) is None
    assert _rule("go", path, before="a", after="b") == "dependency_code"


PKG = {"name": "x", "version": "1.0.0", "scripts": {"test": "node --test"}, "dependencies": {"a": "1"}}


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"dependencies": {"a": "2"}}, None),
        ({"version": "1.0.1"}, None),
        ({"scripts": {"test": "exit 0"}}, "runner_config"),
        ({"scripts": {"test": "node --test", "pretest": "node forge.js"}}, "runner_config"),
        ({"jest": {"setupFiles": ["./forge.js"]}}, "runner_config"),
    ],
)
def test_package_json(change, rule):
    after = json.dumps({**PKG, **change})
    assert _rule("javascript", "package.json", before=json.dumps(PKG), after=after) == rule


CARGO = '[package]\nname = "x"\nversion = "0.1.0"\n\n[dependencies]\nserde = "1"\n'


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        ("", None),
        ('\n[dependencies.regex]\nversion = "1"\n', None),
        ("\n[profile.test]\ndebug-assertions = false\n", "runner_config"),
        ('\n[[test]]\nname = "median"\nharness = false\n', "runner_config"),
        ('\n[dev-dependencies]\npretty_assertions = { path = "fake" }\n', "runner_config"),
        ('\n[patch.crates-io]\nserde = { path = "fake" }\n', "runner_config"),
    ],
)
def test_cargo_toml(extra, rule):
    assert _rule("rust", "Cargo.toml", before=CARGO, after=CARGO + extra) == rule
    if extra:
        # [package] build = "..." is a build script by another name
        built = CARGO.replace('version = "0.1.0"', 'version = "0.1.0"\nbuild = "gen.rs"')
        assert _rule("rust", "Cargo.toml", before=CARGO, after=built) == "runner_config"


GO_MOD = "module example.com/m\n\ngo 1.19\n\nrequire example.com/dep v1.0.0\n"


@pytest.mark.parametrize(
    ("after", "rule"),
    [
        (GO_MOD.replace("v1.0.0", "v1.1.0"), None),
        (GO_MOD + "// replace example.com/dep => ./dep\n", None),
        (GO_MOD + "replace example.com/dep => ./dep\n", "runner_config"),
        (GO_MOD + "replace (\n\texample.com/dep => ./dep\n)\n", "runner_config"),
        (GO_MOD + "toolchain go1.22.0\n", "runner_config"),
    ],
)
def test_go_mod(after, rule):
    assert _rule("go", "go.mod", before=GO_MOD, after=after) == rule


def test_unparsable_and_new_manifests_count_as_changed():
    assert manifest_settings("package.json", "{not json") == {"<unparsable>": True}
    assert _rule("javascript", "package.json", before=json.dumps(PKG), after="{") == "runner_config"
    assert _rule("javascript", "sub/package.json", before=None, after=json.dumps(PKG)) == "runner_config"
    assert _rule("javascript", "sub/package.json", before=None, after='{"name": "y"}') is None


def test_python_rows_have_no_language_rules():
    rows = [json.loads(x) for x in (ROOT / "data/fixtures/instances.jsonl").read_text().splitlines() if x]
    assert all(language_of(instance_from_row(r)) is None for r in rows)
    rows = [
        json.loads(x) for x in (ROOT / "data/fixtures/instances_multilang.jsonl").read_text().splitlines()
    ]
    assert {language_of(instance_from_row(r)).name for r in rows} == {"go", "javascript", "rust"}
