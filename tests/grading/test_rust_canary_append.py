"""Rust canaries at the end of the test patch's integration test file (`canaries.languages`), with the
twins that rewrite that file (`twins.plant`): the script run by bash in a scratch tree, a fake ``cargo``
recording what the test run saw. A new ``tests/<name>.rs`` was a test binary of its own, compiled and
linked for four canaries: about 1 s of CPU in the rust fixture's 2 s cargo run."""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from swe_rl.grading.canaries.languages import plant_language_canaries
from swe_rl.grading.canaries.plan import plan_canaries
from swe_rl.grading.twins.plan import TwinPlan
from swe_rl.grading.twins.plant import plant_twins
from swe_rl.tasks.rows import instance_from_row
from tests.grading.test_language_canaries import ROWS

ORIGINAL = (
    "use stats::median;\n#[test]\nfn median_of_odd_sample() {\n    assert_eq!(median(&[3]), Some(3.0));\n}"
)
TWINNED = ORIGINAL + "\n#[test]\nfn sample_odd_of_median() {\n    assert_eq!(median(&[3]), Some(4.0));\n}\n"
FAKE_CARGO = '#!/bin/sh\ncp tests/median.rs "$SEEN"\necho "test result: ok. 0 passed"\n'


def _plans(check: str | None):
    instance = instance_from_row(dict(ROWS["swe-rl__rust-stats-9001"]))
    script = instance.eval_script or ""
    plan = plant_language_canaries(
        plan_canaries(instance, script, random.Random(3)), instance, script, random.Random(3)
    )
    twins = TwinPlan()
    if check is not None:
        twins = TwinPlan(rewrites={"tests/median.rs": TWINNED}, checks={"tests/median.rs": check})
    return plan, plant_twins(plan, twins, random.Random(4))


def run_with_fake(tmp_path, script: str, tool: str, body: str) -> subprocess.CompletedProcess:
    """`script` (a planted eval script) run by bash in `tmp_path` instead of /testbed, with `tool` on PATH
    a shell script of `body`; ``$SEEN`` and ``$CHECKED`` name files under `tmp_path` for it to record in."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / tool).write_text(body)
    (tmp_path / "bin" / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SEEN": str(tmp_path / "seen")}
    env["CHECKED"] = str(tmp_path / "checked")
    script = script.replace("cd /testbed", f"cd {tmp_path}")
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "check",
    [None, 'cp tests/median.rs "$CHECKED"; true', 'cp tests/median.rs "$CHECKED"; false'],
    ids=["no twins", "twins compile", "twins do not"],
)
def test_the_run_sees_the_canaries_once_and_the_file_is_put_back(tmp_path, check):
    canaries, plan = _plans(check)
    assert canaries.canary_file == "tests/median.rs" and canaries.append_block
    (tmp_path / "tests").mkdir()
    target = tmp_path / "tests" / "median.rs"
    target.write_text(ORIGINAL)  # no final newline: the canaries still start a line of their own
    os.utime(target, (1_000_000_000, 1_000_000_000))
    run = run_with_fake(tmp_path, plan.script, "cargo", FAKE_CARGO)
    seen = (tmp_path / "seen").read_text()
    base = TWINNED if check and check.endswith("true") else ORIGINAL
    assert seen.startswith(base), run.stderr[-3000:]
    # the compile check built the twins with the canaries: the run builds nothing more
    checked = [(tmp_path / "checked").read_text()] if check else []
    assert all(c.startswith(TWINNED) for c in checked), checked
    for name in canaries.must_pass + canaries.must_fail:
        assert seen.count(f"fn {name}()") == 1 and all(c.count(f"fn {name}()") == 1 for c in checked)
    assert target.read_text() == ORIGINAL and target.stat().st_mtime == 1_000_000_000, run.stderr[-3000:]


def test_a_test_patch_without_a_top_level_integration_test_file_gets_a_canary_file_of_its_own():
    row = dict(ROWS["swe-rl__rust-stats-9001"])
    row["test_patch"] = row["test_patch"].replace("tests/median.rs", "src/median_tests.rs")
    instance = instance_from_row(row)
    script = instance.eval_script or ""
    plan = plant_language_canaries(plan_canaries(instance, script, random.Random(3)), instance, script)
    assert plan.canary_file.startswith("tests/") and plan.canary_file != "src/median_tests.rs"
    assert not plan.append_block and f"rm -f {plan.canary_file}" in plan.script


def test_a_package_with_a_harnessless_test_target_gets_the_canaries_in_a_file_of_their_own(tmp_path):
    """``harness = false``: that target's ``#[test]`` functions would not run under libtest, so the
    canaries take a file (a binary) of their own, as before, removed after the run."""
    canaries, plan = _plans('cp tests/median.rs "$CHECKED"; true')
    (tmp_path / "tests").mkdir()
    target = tmp_path / "tests" / "median.rs"
    target.write_text(ORIGINAL)
    (tmp_path / "Cargo.toml").write_text(
        '[package]\nname = "stats"\n\n[[test]]\nname = "bench"\nharness = false\n'
    )
    cargo = '#!/bin/sh\ncat tests/*.rs > "$SEEN"\ncp tests/median.rs "$SEEN.host"\n'
    run = run_with_fake(tmp_path, plan.script, "cargo", cargo)
    seen = (tmp_path / "seen").read_text()
    host = (tmp_path / "seen.host").read_text()
    for name in canaries.must_pass + canaries.must_fail:
        assert seen.count(f"fn {name}()") == 1 and f"fn {name}()" not in host, run.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "tests").iterdir()) == ["median.rs"]
    assert target.read_text() == ORIGINAL


def test_the_host_is_the_integration_test_file_that_defines_a_fail_to_pass_test():
    row = dict(ROWS["swe-rl__rust-stats-9001"])
    helper = (
        "diff --git a/tests/common.rs b/tests/common.rs\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/common.rs\n@@ -0,0 +1,3 @@\n+pub fn sample() -> Vec<i64> {\n+    vec![1, 2]\n+}\n"
    )
    row["test_patch"] = helper + row["test_patch"]
    instance = instance_from_row(row)
    script = instance.eval_script or ""
    plan = plant_language_canaries(plan_canaries(instance, script, random.Random(3)), instance, script)
    assert plan.canary_file == "tests/median.rs" and plan.append_block
    row["FAIL_TO_PASS"] = '["some_other_test"]'
    instance = instance_from_row(row)
    plan = plant_language_canaries(plan_canaries(instance, script, random.Random(3)), instance, script)
    assert plan.canary_file not in ("tests/median.rs", "tests/common.rs") and not plan.append_block
