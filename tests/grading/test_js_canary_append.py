"""JavaScript canaries at the end of the test patch's test file (`canaries.languages`), with the twins that
rewrite that file (`twins.plant`): the script run by bash in a scratch tree, a fake ``node`` recording
what the run saw, and the real ``node --test`` running a file with the canaries appended. node's runner
starts a process per test file: a canary file of its own was one more node process (~0.15 s) a grading."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess

import pytest

from swe_rl.grading.canaries.languages import plant_language_canaries
from swe_rl.grading.canaries.plan import plan_canaries, without_canaries
from swe_rl.grading.twins.plan import TwinPlan
from swe_rl.grading.twins.plant import plant_twins
from swe_rl.tasks.rows import instance_from_row
from tests.grading.test_language_canaries import ROWS
from tests.grading.test_rust_canary_append import run_with_fake

HOST = "test/slugify.test.js"
ORIGINAL = (
    "'use strict';\nconst test = require('node:test');\nconst assert = require('node:assert');\n"
    "test('collapses runs of punctuation and spaces', () => {\n  assert.equal(1 + 1, 2);\n});"
)  # no final newline: the canaries still start a line of their own
TWINNED = (
    ORIGINAL + "\ntest('spaces and punctuation of runs collapses', () => {\n  assert.equal(1 + 1, 3);\n});\n"
)
FAKE_NODE = '#!/bin/sh\ncp test/slugify.test.js "$SEEN"; ls test > "$SEEN.files"\n'


def _plans(check: str | None, row: dict | None = None):
    instance = instance_from_row(dict(row or ROWS["swe-rl__js-slugify-9001"]))
    script = instance.eval_script or ""
    plan = plant_language_canaries(
        plan_canaries(instance, script, random.Random(3)), instance, script, random.Random(3)
    )
    twins = TwinPlan()
    if check is not None:
        twins = TwinPlan(rewrites={HOST: TWINNED}, checks={HOST: check})
    return plan, plant_twins(plan, twins, random.Random(4))


def _run(tmp_path, plan, original: str = ORIGINAL, package: str | None = None):
    (tmp_path / "test").mkdir()
    target = tmp_path / HOST
    target.write_text(original)
    os.utime(target, (1_000_000_000, 1_000_000_000))
    if package is not None:
        (tmp_path / "package.json").write_text(package)
    return run_with_fake(tmp_path, plan.script, "node", FAKE_NODE), target


@pytest.mark.parametrize(
    "check",
    [None, 'cp test/slugify.test.js "$CHECKED"; true', 'cp test/slugify.test.js "$CHECKED"; false'],
    ids=["no twins", "twins compile", "twins do not"],
)
def test_the_run_sees_the_canaries_once_and_the_file_is_put_back(tmp_path, check):
    canaries, plan = _plans(check)
    assert canaries.canary_file == HOST and canaries.append_block
    run, target = _run(tmp_path, plan, package='{"name": "slugify", "type": "commonjs"}\n')
    seen = (tmp_path / "seen").read_text()
    base = TWINNED if check and check.endswith("true") else ORIGINAL
    assert seen.startswith(base), run.stderr[-3000:]
    assert (tmp_path / "seen.files").read_text().split() == ["slugify.test.js"]  # no file of their own
    checked = [(tmp_path / "checked").read_text()] if check else []  # the check saw twins and canaries
    assert all(c.startswith(TWINNED) for c in checked), checked
    for name in canaries.must_pass + canaries.must_fail:
        quoted = repr(name.removeprefix("- "))
        assert seen.count(quoted) == 1 and all(c.count(quoted) == 1 for c in checked)
    assert target.read_text() == ORIGINAL and target.stat().st_mtime == 1_000_000_000, run.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "test").iterdir()) == ["slugify.test.js"]


@pytest.mark.parametrize(
    ("original", "package"),
    [
        (ORIGINAL, '{"name": "slugify",\n  "type" : "module"}\n'),  # a .js file of an ES module package
        ("import test from 'node:test';\nimport assert from 'node:assert';\ntest('x', () => {});\n", None),
        ("export const x = 1;\n// require('node:test')\n", '{"name": "slugify"}'),
        ("test('no require here', () => {});\n", None),
    ],
    ids=["type module", "import statements", "export statement", "no require"],
)
def test_a_file_that_may_be_an_es_module_is_left_alone_and_the_canaries_get_a_file_of_their_own(
    tmp_path, original, package
):
    """``require`` throws in an ES module, and with it every test of that file: the canaries go to a
    ``.cjs`` file of their own beside it, found by node's runner, and removed after the run."""
    canaries, plan = _plans(None)
    run, target = _run(tmp_path, plan, original, package)
    seen = (tmp_path / "seen").read_text()
    files = (tmp_path / "seen.files").read_text().split()
    assert "__swe_test_" not in seen and len(files) == 2 and files[0].endswith(".test.cjs"), run.stderr[
        -3000:
    ]
    assert target.read_text() == original and target.stat().st_mtime == 1_000_000_000
    assert sorted(p.name for p in (tmp_path / "test").iterdir()) == ["slugify.test.js"]


def test_the_host_is_a_test_file_that_defines_a_fail_to_pass_test_and_the_command_names_no_file():
    row = dict(ROWS["swe-rl__js-slugify-9001"])
    plan, _ = _plans(None, row)
    assert plan.canary_file == HOST and plan.append_block
    named = dict(
        row,
        eval_script=row["eval_script"].replace(
            "--test-reporter=tap test/", "--test-reporter=tap test/slugify.test.js"
        ),
    )
    plan, _ = _plans(None, named)
    assert plan.canary_file.endswith(".test.cjs") and not plan.append_block  # named on the command
    helper = (  # names the test as data, first: not the file that defines it
        "diff --git a/test/cases.js b/test/cases.js\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/test/cases.js\n@@ -0,0 +1 @@\n+module.exports = ['collapses runs of punctuation and spaces'];\n"
    )
    plan, _ = _plans(None, dict(row, test_patch=helper + row["test_patch"]))
    assert plan.canary_file == HOST and plan.append_block
    outside = row["test_patch"].replace(
        "test/slugify.test.js", "src/slugify.spec.js"
    )  # node finds no such file
    plan, _ = _plans(None, dict(row, test_patch=outside))
    assert plan.canary_file.endswith(".test.cjs") and not plan.append_block
    other = dict(row, FAIL_TO_PASS='["- lowercases a single word"]')  # not in the test patch
    plan, _ = _plans(None, other)
    assert plan.canary_file.endswith(".test.cjs") and not plan.append_block


def test_the_canaries_own_statuses_are_dropped_and_the_host_files_tests_kept():
    plan, _ = _plans(None)
    statuses = {name: "PASSED" for name in plan.must_pass + plan.must_fail}
    statuses["- collapses runs of punctuation and spaces"] = "PASSED"
    statuses["test/slugify.test.js > trims separators at both ends"] = "FAILED"  # a runner naming the file
    assert without_canaries(plan, statuses) == {
        "- collapses runs of punctuation and spaces": "PASSED",
        "test/slugify.test.js > trims separators at both ends": "FAILED",
    }


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_real_node_runs_the_appended_canaries_beside_the_files_own_tests(tmp_path):
    """The appended lines bind names of their own (the file's ``test`` and ``assert`` stay its own) and run
    in the file's process: node's TAP names the two that pass and the two that fail."""
    canaries, plan = _plans(None)
    (tmp_path / "test").mkdir()
    (tmp_path / HOST).write_text(ORIGINAL)
    script = "\n".join(line for line in [f"cd {tmp_path}", canaries.append_block] if line)
    subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True, timeout=60)
    run = subprocess.run(
        ["node", "--test", "--test-reporter=tap", "test/"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    results = {}
    for line in run.stdout.splitlines():
        found = re.match(r"\s*(not ok|ok) \d+ - (.*)$", line)
        if found:
            results[found.group(2)] = found.group(1)
    assert results["collapses runs of punctuation and spaces"] == "ok", run.stdout[-3000:]
    assert [results.get(n.removeprefix("- ")) for n in canaries.must_pass] == ["ok", "ok"], run.stdout[-3000:]
    assert [results.get(n.removeprefix("- ")) for n in canaries.must_fail] == ["not ok", "not ok"]
