"""Go, JavaScript and Rust twins (`swe_rl.grading.twins.languages`) derived from the bundled fixtures' test
files and from small sources: what is copied, what changes, what is skipped and why."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from swe_rl.grading.canaries.plan import CanaryPlan
from swe_rl.grading.integrity import patch_paths
from swe_rl.grading.twins.languages import _end_from, _head, plan_language_twins, split_top_level
from swe_rl.grading.twins.plant import files_to_read, plan_twins
from swe_rl.tasks import TaskInstance, instance_from_row

ROOT = Path(__file__).resolve().parents[2]
MULTILANG = ROOT / "data" / "fixtures" / "multilang"
ROWS = {
    json.loads(line)["instance_id"]: json.loads(line)
    for line in (ROOT / "data/fixtures/instances_multilang.jsonl").read_text().splitlines()
    if line.strip()
}
PLAN = CanaryPlan(script="cargo test --no-fail-fast", nonce="n", runner="go")


def _after_test_patch(instance_id: str, tmp_path: Path) -> tuple[TaskInstance, dict[str, str | None]]:
    """The fixture's test files as the grading container has them (source + test patch)."""
    source = MULTILANG / instance_id / "source"
    subprocess.run(["cp", "-r", f"{source}/.", str(tmp_path)], check=True)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", str(MULTILANG / instance_id / "test.patch")], cwd=tmp_path, check=True)
    instance = instance_from_row(ROWS[instance_id])
    return instance, {p: (tmp_path / p).read_text() for p in patch_paths(instance.test_patch)}


@pytest.mark.parametrize(
    ("instance_id", "changed", "check"),
    [
        (
            "swe-rl__go-version-9001",
            "return got == c.want }() {",
            "go test -count=1 -run '^$' -exec /bin/true ./.",
        ),
        ("swe-rl__js-slugify-9001", "assert.equal(slugify('Hello,  World!'), '", "node --check"),
        (
            "swe-rl__rust-stats-9001",
            "assert_eq!(median(&[4, 1, 3, 2]), Some(",
            "cargo test --offline --no-run",
        ),
    ],
)
def test_every_fixture_gets_a_twin_of_each_fail_to_pass_test(instance_id, changed, check, tmp_path):
    instance, sources = _after_test_patch(instance_id, tmp_path)
    assert files_to_read(instance) == list(sources)
    plan = plan_twins(instance, PLAN, sources, random.Random(2))
    assert not plan.skipped and len(plan.twins) == len(set(instance.fail_to_pass)), plan
    (path, text), original = next(iter(plan.rewrites.items())), sources[next(iter(plan.rewrites))]
    assert changed in text and plan.checks[path].startswith(check)
    for twin in plan.twins:
        assert twin.original in instance.fail_to_pass and twin.test_id != twin.original
        assert twin.test_id.removeprefix("- ") in text and twin.file == path
        # named from the file's own words, not the original's name with words added (issue 48)
        assert (
            not twin.test_id.split("::")[-1]
            .removeprefix("- ")
            .startswith(twin.original.split("::")[-1].removeprefix("- "))
        )
    # the original is untouched and the twin sits right after it
    assert text.startswith(original.split("\n\n")[0]) and len(text) > len(original)
    other = plan_twins(instance, PLAN, sources, random.Random(3))
    assert {t.test_id for t in other.twins}.isdisjoint(t.test_id for t in plan.twins)  # random per run


def test_the_rust_expected_literal_differs_and_keeps_its_type(tmp_path):
    instance, sources = _after_test_patch("swe-rl__rust-stats-9001", tmp_path)
    plan = plan_language_twins(instance, PLAN, sources, random.Random(4))
    text = plan.rewrites["tests/median.rs"]
    twin_body = text.split(plan.twins[0].test_id, 1)[1]
    first = twin_body.split("assert_eq!(median(&[4, 1, 3, 2]), Some(", 1)[1].split(")", 1)[0]
    assert "." in first and float(first) != 2.5  # a float literal still, another value


def _rust(body: str, attrs: str = "#[test]") -> TaskInstance:
    return TaskInstance(
        instance_id="r-1", repo="r/r", problem_statement="x", image="x", fail_to_pass=["a"], log_parser="parse_log_cargo",
        test_patch="diff --git a/tests/t.rs b/tests/t.rs\n--- a/tests/t.rs\n+++ b/tests/t.rs\n",
    ), {"tests/t.rs": f"{attrs}\nfn a() {{\n{body}\n}}\n"}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "attrs", "reason"),
    [
        ("    assert!(f());", "#[test]", "no one-line assert_eq!"),
        ("    assert_eq!(f(), None);", "#[test]", "no one-line assert_eq!"),
        ("    assert_eq!(f(), '?');", "#[test]", "no one-line assert_eq!"),
        ("    assert_eq!(f(), 1);", "#[test]\n#[should_panic]", "should_panic"),
        ("    assert_eq!(f(), 1);", "", "not a #[test]"),
    ],
)
def test_a_rust_test_without_a_sure_mutation_is_skipped(body, attrs, reason):
    instance, sources = _rust(body, attrs)
    plan = plan_language_twins(instance, PLAN, sources, random.Random(1))
    assert not plan.twins and reason in plan.skipped[0].reason, plan


def _go(body: str) -> tuple[TaskInstance, dict[str, str | None]]:
    return TaskInstance(
        instance_id="g-1", repo="g/g", problem_statement="x", image="x", fail_to_pass=["TestA"], log_parser="parse_log_gotest",
        test_patch="diff --git a/a_test.go b/a_test.go\n--- a/a_test.go\n+++ b/a_test.go\n",
    ), {"a_test.go": f"package a\n\nfunc TestA(tt *testing.T) {{\n{body}\n}}\n"}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "twin"),
    [
        ('\tif err := f(); err != nil {\n\t\ttt.Fatal(err)\n\t}\n\tif g() != "x;y" {\n\t\ttt.Errorf("no")\n\t}',
         'if func() bool { reachedTestA'),
        ("\tif a() != b() && c {\n\t\ttt.Error()\n\t}", None),
        ("\tif a() != b() {\n\t\tlog.Print()\n\t}", None),
    ],
)  # fmt: skip
def test_go_turns_only_a_plain_comparison_that_reports_an_error(body, twin):
    instance, sources = _go(body)
    plan = plan_language_twins(instance, PLAN, sources, random.Random(1))
    if twin is None:
        assert not plan.twins and "no `if got != want" in plan.skipped[0].reason
        return
    text = plan.rewrites["a_test.go"]
    assert 'return g() == "x;y" }() {' in text and "tt.Cleanup(func()" in text and "err != nil" in text


def test_split_top_level_ignores_quotes_and_brackets():
    assert split_top_level('f(a, b), "x, y", [1, 2]', ",") == ["f(a, b)", ' "x, y"', " [1, 2]"]
    assert split_top_level("a != 'b!=c'", "!=") == ["a ", " 'b!=c'"]


def test_no_twins_where_a_failing_one_could_stop_the_run():
    instance, sources = _rust("    assert_eq!(f(), 1);")
    plan = plan_language_twins(
        instance, CanaryPlan(script="cargo test", nonce="n"), sources, random.Random(1)
    )
    assert not plan.twins and "no-fail-fast" in plan.refused
    refused = CanaryPlan(script="", nonce="n", runner="pytest", skipped="the command stops early (-x)")
    assert plan_twins(instance, refused, sources).refused == "the command stops early (-x)"


def test_a_row_without_test_patch_finds_its_test_files(tmp_path):
    """A mutation row (no test patch: its ids name no file) gets twins from the test files a search of the
    base commit finds; a file outside the test sources is never taken (the twins rewrite it whole)."""
    from swe_rl.grading.twins.plant import reader_script, search_patterns

    row = dict(ROWS["swe-rl__go-version-9001"], test_patch="", instance_id="swe-rl__go-version-9009")
    row["eval_script"] = row["eval_script"].split("git apply -v -")[0] + (
        ": '>>>>> Start Test Output'\ngo test -v -count=1 ./...\n: '>>>>> End Test Output'\n"
    )
    instance = instance_from_row(row)
    assert search_patterns(instance) == (["func TestCompareNumeric("], ["*_test.go"])
    subprocess.run(
        ["cp", "-r", f"{MULTILANG / 'swe-rl__go-version-9001' / 'source'}/.", str(tmp_path)], check=True
    )
    subprocess.run(
        ["git", "apply", str(MULTILANG / "swe-rl__go-version-9001" / "test.patch")], cwd=tmp_path, check=True
    )
    (tmp_path / "notes.go").write_text("package version\n\n// func TestCompareNumeric( is named here too\n")
    git = ["git", "-c", "user.email=x@y", "-c", "user.name=x"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=tmp_path, check=True)
    folder = tmp_path / ".reader"
    script = reader_script(
        instance.model_copy(update={"workdir": str(tmp_path), "base_commit": "HEAD"}), [], str(folder)
    )
    subprocess.run(["bash", "-c", script], check=True)
    assert (folder / "found").read_text().split() == ["version_test.go"]
    text = (folder / "found0").read_text()
    plan = plan_language_twins(
        instance, PLAN.model_copy(update={"script": ""}), {"version_test.go": text}, random.Random(3)
    )
    assert [t.original for t in plan.twins] == ["TestCompareNumeric"] and "version_test.go" in plan.rewrites
    # a row with a test patch searches nothing
    assert search_patterns(instance_from_row(ROWS["swe-rl__go-version-9001"])) == ([], [])


def test_a_javascript_row_without_test_patch_gets_no_searched_files():
    """Its test command may run build output (uuidjs runs dist/): rewriting such a file with twins broke
    gold on a real row, so JavaScript rows without test patch are not searched (Go and Rust are)."""
    from swe_rl.grading.twins.plant import search_patterns

    row = {**ROWS["swe-rl__js-slugify-9001"], "test_patch": ""}
    assert search_patterns(instance_from_row(row)) == ([], [])


@pytest.mark.parametrize("instance_id", sorted(ROWS))
def test_a_twin_is_placed_among_the_tests_not_always_right_after_its_original(instance_id, tmp_path):
    """Issue 48: a twin always right after its original was told by its place. It goes after the original or
    after another test of the file (the seed decides); every original line stays, in order."""
    instance, sources = _after_test_patch(instance_id, tmp_path)
    right_after = []
    for seed in range(40):
        plan = plan_twins(instance, PLAN, sources, random.Random(seed))
        twin = plan.twins[0]
        text, original = plan.rewrites[twin.file], sources[twin.file]
        assert original is not None
        lines = iter(text.split("\n"))
        assert all(line in lines for line in original.split("\n"))  # a subsequence: nothing moved
        language = ROWS[instance_id]["instance_id"].split("__")[1].split("-")[0].replace("js", "javascript")
        name = twin.original.split("::")[-1].split("/")[0].removeprefix("- ")
        end = _end_from(language, text, _head(language, text, name))
        right_after.append(twin.test_id.split("::")[-1].removeprefix("- ") in text[end : end + 200])
    assert any(right_after) and not all(right_after), right_after


def _twin_place(language: str, source: str, test: str, seed: int) -> str:
    row = {**ROWS[next(i for i in ROWS if language in i)], "FAIL_TO_PASS": [test], "test_patch": ""}
    instance = instance_from_row(row)
    plan = plan_language_twins(instance, PLAN, {"t": source}, random.Random(seed))
    assert len(plan.twins) == 1, plan
    return plan.rewrites["t"]


RUST_TWO_MODULES = """mod small {
    use super::*;

    #[test]
    fn adds() {
        assert_eq!(add(1, 2), 3);
    }

    #[test]
    fn subtracts() {
        assert_eq!(sub(3, 2), 1);
    }
}

mod large {
    use super::big::*;

    #[test]
    fn multiplies() {
        assert_eq!(mul(2, 3), 6);
    }
}
"""

JS_TWO_BLOCKS = """describe('small', () => {
  const f = require('./small');
  test('adds', () => {
    assert.equal(f(1, 2), 3);
  });

  test('subtracts', () => {
    assert.equal(f(3, -2), 1);
  });
});

describe('large', () => {
  const f = require('./large');
  test('multiplies', () => {
    assert.equal(f(2, 3), 6);
  });
});
"""


@pytest.mark.parametrize(
    ("language", "source", "test", "call", "boundary"),
    [
        ("rust", RUST_TWO_MODULES, "tests::adds", "add(1, 2)", "mod large"),
        ("js", JS_TWO_BLOCKS, "adds", "f(1, 2)", "describe('large'"),
    ],
)
def test_a_twin_stays_in_the_block_of_its_original(language, source, test, call, boundary):
    """A Rust twin stays in its module and a JavaScript twin in its describe (the names the original uses
    are in scope there and nowhere else), while still moving among that block's tests."""
    after_sibling = set()
    for seed in range(30):
        head, _, tail = _twin_place(language, source, test, seed).partition(boundary)
        assert tail == source.partition(boundary)[2]  # nothing was added to the other block
        assert head.count(call) == 2  # the original and its twin, both in the first block
        after_sibling.add(head.rindex(call) > head.index("subtracts"))
    assert after_sibling == {True, False}


JS_HELPER_BLOCKS = """function whenInput(value, fn) {
  describe('when input is ' + value, fn);
}

describe('parse(number)', function () {
  whenInput('1', function () {
    it('should return one', function () {
      assert.strictEqual(parse('1'), 1);
    });
  });
});
"""


def _js_plan(source: str, test: str, seed: int):
    row = {**ROWS["swe-rl__js-slugify-9001"], "FAIL_TO_PASS": [test], "test_patch": ""}
    return plan_language_twins(instance_from_row(row), PLAN, {"t": source}, random.Random(seed))


def test_a_javascript_block_gets_a_twin_of_the_whole_block_with_one_test_changed_and_renamed():
    """mocha-style rows expect whole blocks (``- small``: a `describe` node's runner reports failed when
    one of its tests fails). The twin copies the block under a new title with the first test that has an
    equal-like assertion changed, and that test renamed too: under its own title it would report a test
    the task expects to pass as failed (a false trip of gold)."""
    titles = {"small", "adds", "subtracts", "large", "multiplies"}
    for seed in range(20):
        plan = _js_plan(JS_TWO_BLOCKS, "- small", seed)
        assert len(plan.twins) == 1 and not plan.skipped, plan
        [twin] = plan.twins
        text = plan.rewrites["t"]
        block = text[text.index(f"describe('{twin.test_id[2:]}'") :]
        block = block[: block.index("\n});") + 4]
        assert twin.test_id[2:] not in titles and "in the block" in twin.mutation
        assert block.count("f(1, 2)") == 1 and "assert.equal(f(1, 2), 3)" not in block  # changed
        assert "test('subtracts'" in block  # the others as they were
        renamed = block.split("test('", 2)[1].split("'", 1)[0]
        assert renamed not in titles and set(renamed.split()) >= {"adds"}, renamed
        assert text.replace(block, "").replace("\n\n;", "").count("describe(") == 2


def test_a_javascript_block_whose_tests_sit_in_a_helper_s_block_gets_no_twin():
    """A test inside a nested call (a helper that opens a `describe` whose title it computes) is not
    changed: the nested block would fail under a title the task may expect to pass, and the grader cannot
    rename it."""
    plan = _js_plan(JS_HELPER_BLOCKS, "- parse(number)", 3)
    assert not plan.twins and plan.skipped and "no test of the block" in plan.skipped[0].reason
