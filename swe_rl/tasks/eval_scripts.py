"""Eval scripts: the bash script that applies an instance's test patch and runs its tests.

The row's own ``eval_script`` when it has one (swebench 5.x rows all do); R2E-Gym instances get a
script around the image's ``run_tests.sh``; older SWE-bench-style rows get the one swebench 4.x
builds from its repo/version specs, offline, when 4.x is importable. swebench 5.x has no specs: such
rows are converted once with ``swe-convert-rows`` where 4.1.0 is installed (docs/grading.md, "Rows").
`official_script` frames a script as 5.x runs it: recording the test command's exit status.
"""

from __future__ import annotations

from swe_rl.tasks.instance import DataSource, TaskInstance

__all__ = [
    "END_TEST_OUTPUT",
    "RUN_END_MARKER",
    "RUN_START_MARKER",
    "START_TEST_OUTPUT",
    "TEST_EXIT_CODE",
    "EvalSpecUnavailable",
    "eval_script_for",
    "official_script",
]

# SWE-bench's eval scripts print these around the test run; the grader slices on them.
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
# The grader's own markers, printed inside SWE-bench's by the runner shell with a per-run nonce
# (swe_rl/grading/canaries/plan.py): ``>>>>> swe-rl run start <token>`` before the test command and
# ``>>>>> swe-rl run end <nonce> exit <status>`` after it. They differ from SWE-bench's text, so the
# official slicing of an honest log is unchanged.
RUN_START_MARKER = ">>>>> swe-rl run start"
RUN_END_MARKER = ">>>>> swe-rl run end"
# swebench 5.x records the test command's exit status after the end marker, outside the parsed section.
TEST_EXIT_CODE = ">>>>> Test Exit Code"
_EXIT_VAR = "SWEBENCH_TEST_EXIT_CODE"
_HEADER = ("#!/bin/bash", "set -uxo pipefail")


def official_script(script: str) -> str:
    """The script as swebench 5.x runs it: its header, and ``$?`` of the test command recorded.

    The status is taken on the line before the end marker and printed after it, as
    ``>>>>> Test Exit Code: N``; the grader cross-checks it with the log (`swe_rl.grading.rules`).
    A script without the end marker is only re-framed.
    """
    lines = [line for line in script.strip().split("\n") if line not in _HEADER]
    for i, line in enumerate(lines):
        if END_TEST_OUTPUT in line:
            lines[i : i + 1] = [f"{_EXIT_VAR}=$?", line, f'echo "{TEST_EXIT_CODE}: ${_EXIT_VAR}"']
            break
    return "\n".join([*_HEADER, *lines]) + "\n"


class EvalSpecUnavailable(RuntimeError):
    """No eval script can be had for an instance (none in the row, and swebench cannot build one)."""


def _r2e_eval_script(instance: TaskInstance) -> str:
    # The hidden tests live at /r2e_tests and run_tests.sh runs them from the repo root.
    wd = instance.workdir
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "set -uxo pipefail",
                f"cd {wd}",
                f"rm -rf {wd}/r2e_tests && ln -s /r2e_tests {wd}/r2e_tests",
                f": '{START_TEST_OUTPUT}'",
                f"bash {wd}/run_tests.sh",
                f": '{END_TEST_OUTPUT}'",
                f"rm -f {wd}/r2e_tests",
            ]
        )
        + "\n"
    )


def eval_script_for(instance: TaskInstance) -> str:
    """The bash script that applies the test patch and runs the instance's tests.

    Uses the row's own ``eval_script`` when present. Otherwise R2E-Gym instances get a
    script around the image's ``run_tests.sh``, and SWE-bench-style instances get the
    script the pinned ``swebench`` generates from its repo/version specs. Only the eval
    part of the spec is built (``make_eval_script_list``), which is pure string work:
    ``make_test_spec`` would also build the environment script, and that downloads
    requirements files for some repos, so it is avoided to stay offline.
    """
    if instance.eval_script:
        return instance.eval_script
    if instance.source is DataSource.R2EGYM:
        return _r2e_eval_script(instance)
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
        from swebench.harness.test_spec.create_scripts import make_eval_script_list
    except ImportError as exc:
        raise EvalSpecUnavailable(
            f"{instance.instance_id}: the row has no eval_script, and swebench 4.x that builds one from "
            f"its repo/version specs is not importable ({exc}); swe-preprocess and swe-eval convert such "
            "rows themselves, or convert them once: swe-convert-rows ROWS.jsonl OUT.jsonl (it uses "
            "swebench 4.1.0 from ~/.cache/swe-rl/swebench-4.1.0, installing it there when missing)"
        ) from None
    specs = MAP_REPO_VERSION_TO_SPECS.get(instance.repo)
    if specs is None:
        raise EvalSpecUnavailable(
            f"{instance.instance_id}: repo {instance.repo!r} is unknown to swebench; "
            "the row must carry an eval_script"
        )
    if instance.version not in specs:
        raise EvalSpecUnavailable(
            f"{instance.instance_id}: swebench has no specs for {instance.repo} "
            f"version {instance.version!r} (known: {', '.join(sorted(specs))})"
        )
    row = {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "version": instance.version,
        "base_commit": instance.base_commit,
        "test_patch": instance.test_patch,
        "problem_statement": instance.problem_statement,
        "FAIL_TO_PASS": instance.fail_to_pass,
        "PASS_TO_PASS": instance.pass_to_pass,
        **{k: v for k, v in instance.extra.items() if k not in {"instance_id", "repo", "version"}},
    }
    try:
        lines = make_eval_script_list(
            row, specs[instance.version], "testbed", instance.workdir,
            instance.base_commit, instance.test_patch,
        )  # fmt: skip
    except Exception as exc:  # malformed test_patch, spec quirks: never a stack trace upstream
        raise EvalSpecUnavailable(
            f"{instance.instance_id}: swebench could not build the eval script: {type(exc).__name__}: {exc}"
        ) from exc
    # Same framing as swebench's TestSpec.eval_script (no -e: tests are reverted at the end).
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"
