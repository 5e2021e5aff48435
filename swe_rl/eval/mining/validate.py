"""Run a candidate's tests before and after its gold patch; FAIL_TO_PASS, PASS_TO_PASS and the row.

Both runs happen in fresh containers of the task image, with no network, through the same eval
script the row will carry (the test patch applied, the suite between SWE-bench's markers); the
"after" run applies the gold patch first. The log between the markers is read by the parser the
project registers under the language's swebench 5.x name (the same map swebench 5.x's own function
gives). FAIL_TO_PASS: tests that pass after and did not pass before (failed, or did not exist);
PASS_TO_PASS: tests that pass in both. A test that the gold patch itself adds (a Rust unit test
inside a source file) is not the agent's to pass and is left out of FAIL_TO_PASS.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Mapping
from typing import Any

from swe_rl.eval.mining.build import LABEL, WORKDIR
from swe_rl.eval.mining.history import Candidate
from swe_rl.eval.mining.languages import RepoLanguage
from swe_rl.grading.parsers import PASSED, parser_named
from swe_rl.tasks.datasets.common import apply_test_patch_lines, eval_script_around
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

__all__ = ["DATA_SOURCE", "NoFailToPass", "Validation", "run_script", "task_row", "test_lists", "validate"]

DATA_SOURCE = "swe-rl-mined"


class NoFailToPass(ValueError):
    """No test fails before the gold patch and passes after it: the commit tells nothing."""


def eval_script(
    language: RepoLanguage, candidate: Candidate, base_commit: str, *, with_gold: bool = False
) -> str:
    gold = apply_test_patch_lines(candidate.gold_patch, "") if with_gold else []
    return eval_script_around(
        WORKDIR, [language.command_for(candidate.test_files)], test_patch=candidate.test_patch, base_commit=base_commit,
        before_tests=gold,
    )  # fmt: skip


def run_script(image: str, script: str, *, name_prefix: str, timeout: float) -> str:
    """The output of ``script`` in a fresh container of ``image`` (no network), removed afterwards.

    One stream for stdout and stderr: the markers ``set -x`` prints stay around the output they frame."""
    name = f"{name_prefix}-{uuid.uuid4().hex[:10]}"
    cmd = ["docker", "run", "--rm", "-i", "--network", "none", "--name", name, "--label", f"{LABEL}=run",
           image, "bash", "-s"]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, input=script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        raise
    return proc.stdout


def run_started(image: str, script: str, *, name_prefix: str, timeout: float) -> str:
    """`run_script`, once more when the log never reached the test output's start marker.

    Why: under load the daemon can fail to start a container (its error is the whole log); read as a run
    where no test ran, it made the "before" run of a good candidate an import failure and dropped it (seen
    twice in CI). A script that really stops before the marker costs one more run, and reads the same."""
    log = run_script(image, script, name_prefix=name_prefix, timeout=timeout)
    if START_TEST_OUTPUT not in log:
        log = run_script(image, script, name_prefix=name_prefix, timeout=timeout)
    return log


def test_section(log: str) -> str:
    """The part of the log between the start and end markers (the whole log when they are missing)."""
    start, end = log.rfind(START_TEST_OUTPUT), log.rfind(END_TEST_OUTPUT)
    if start < 0 or end < start:
        return log
    return log[log.index("\n", start) + 1 if "\n" in log[start:end] else start : end]


def _leaf(test: str) -> str:
    return re.split(r"::|/|\.| ", test.strip())[-1]


def test_lists(
    before: Mapping[str, str], after: Mapping[str, str], candidate: Candidate
) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS) from the two runs' maps."""
    gold_added = "\n".join(line for line in candidate.gold_patch.splitlines() if line.startswith("+"))
    f2p, p2p = [], []
    for test, status in sorted(after.items()):
        if status != PASSED:
            continue
        if before.get(test) == PASSED:
            p2p.append(test)
            continue
        leaf = _leaf(test)
        if leaf and leaf in gold_added and leaf not in candidate.test_patch:
            continue  # the gold patch's own test
        f2p.append(test)
    return f2p, p2p


class Validation(dict[str, Any]):
    """What the two runs found: ``before``/``after`` maps, ``fail_to_pass``, ``pass_to_pass``."""


def validate(
    language: RepoLanguage,
    candidate: Candidate,
    image: str,
    base_commit: str,
    *,
    name_prefix: str,
    timeout: float,
) -> Validation:
    parse = parser_named(language.log_parser)
    logs = {}
    for label, with_gold in (("before", False), ("after", True)):
        script = eval_script(language, candidate, base_commit, with_gold=with_gold)
        logs[label] = run_started(image, script, name_prefix=name_prefix, timeout=timeout)
    before, after = parse(test_section(logs["before"])), parse(test_section(logs["after"]))
    f2p, p2p = test_lists(before, after, candidate)
    if not f2p:
        raise NoFailToPass(
            f"no test fails before the gold patch and passes after it ({len(after)} tests after, "
            f"{sum(s == PASSED for s in after.values())} passing)"
        )
    return Validation(before=before, after=after, fail_to_pass=f2p, pass_to_pass=p2p, logs=logs)


def task_row(
    *,
    repo_name: str,
    instance_id: str,
    language: RepoLanguage,
    candidate: Candidate,
    image: str,
    base_commit: str,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    version: str = "",
    problem_statement: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The swebench 5.x row plus ours.

    swebench 5.x's ``make_test_spec`` reads ``instance_id``, ``image``, ``eval_script``, ``repo``,
    ``version``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``log_parser`` and ``eval_type`` (its grading
    looks the parser up in its ``PARSER_REGISTRY``); ``image_name`` is the same image under the name
    this project's loaders and older tools read."""
    problem = (
        problem_statement or candidate.message or f"Make the tests of {', '.join(candidate.test_files)} pass."
    )
    return {**(extra or {}),
        "instance_id": instance_id, "repo": repo_name, "base_commit": base_commit,
        "problem_statement": problem, "patch": candidate.gold_patch, "test_patch": candidate.test_patch,
        "FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass, "version": version,
        "environment_setup_commit": base_commit, "created_at": candidate.created_at,
        "image": image, "image_name": image, "eval_script": eval_script(language, candidate, base_commit),
        "log_parser": language.log_parser, "eval_type": "pass_and_fail", "workdir": WORKDIR,
        "language": language.name, "data_source": DATA_SOURCE, "mined_commit": candidate.commit,
    }  # fmt: skip
