#!/usr/bin/env python3
"""How many FAIL_TO_PASS tests get a twin (`swe_rl.grading.twins.plant`), on instances whose images are built.

For each row (a JSONL of SWE-bench-style instances, by default the bundled fixtures) the test files are
read from the row's image exactly as the grader reads them (base commit + test patch through a private
index, `twins.read_test_files`'s script, in a throw-away container), twins are derived with no cap on
their number, and the distinct FAIL_TO_PASS tests are counted: with a twin, or skipped and why.
Nothing is graded; the images must exist (`data/build_fixture_images.sh`).

    python bench/twin_coverage.py data/fixtures/instances.jsonl data/fixtures/instances_multilang.jsonl
"""

from __future__ import annotations

import argparse
import ast
import base64
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

from swe_rl.grading.canaries.plan import CanaryPlan
from swe_rl.grading.languages import language_of
from swe_rl.grading.twins import plant as twins_module
from swe_rl.tasks import TaskInstance
from swe_rl.tasks.loading import load_instances


def _sources(instance: TaskInstance) -> dict[str, str | None]:
    paths = twins_module.files_to_read(instance)
    script = twins_module.reader_script(instance, paths, "/tmp/.swe-twin-coverage")
    script += "".join(
        f"\necho '@@{i}'; base64 -w0 /tmp/.swe-twin-coverage/{i} 2>/dev/null; echo" for i in range(len(paths))
    )
    script = script.replace("\nexit 0\n", "\n")
    script += "\nfor f in $(ls /tmp/.swe-twin-coverage/ | grep '^found[0-9]'); do echo \"@@$f\"; base64 -w0 /tmp/.swe-twin-coverage/$f; echo; done"
    script += "\necho '@@list'; cat /tmp/.swe-twin-coverage/found 2>/dev/null"
    out = subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", "--label", "swe-rl.helper=twins", "--entrypoint", "bash",
         instance.image, "-s"],
        input=script, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    got: dict[str, str | None] = dict.fromkeys(paths)
    blocks = dict(block.partition("\n")[::2] for block in out.stdout.split("@@")[1:])
    found = [p for p in blocks.pop("list", "").split("\n") if p]
    for index, body in blocks.items():
        path = found[int(index[5:])] if index.startswith("found") else paths[int(index)]
        try:
            got[path] = base64.b64decode(body.strip()).decode("utf-8") or None
        except (ValueError, UnicodeDecodeError, IndexError):
            pass
    return got


_SOURCES = Path(__file__).resolve().parent.parent / "data" / "real_tasks" / "sources.tsv"


def _mirror_sources(instance: TaskInstance, mirrors: str) -> dict[str, str | None]:
    """The test files from a local git mirror (``<mirrors>/owner+name/repo``): the base commit with the
    test patch applied in a private index, else the upstream commit the row was mined from."""
    git_dir = f"{mirrors}/{instance.repo.replace('/', '+')}/repo"
    paths = twins_module.files_to_read(instance)
    env = {"GIT_INDEX_FILE": f"/tmp/.swe-twin-coverage-{instance.instance_id}"}
    got: dict[str, str | None] = dict.fromkeys(paths)
    git = ["git", f"--git-dir={git_dir}"]
    # the base commit, else each release tag of the repository (a real task's base is a release the row
    # was mined from, in a history of its own): the first the test patch applies to
    tags = subprocess.run([*git, "tag"], capture_output=True, text=True).stdout.split()
    patched = False
    releases = [  # data/real_tasks/sources.tsv: a row without test patch (a mutation) is of its one release
        t
        for line in (_SOURCES.read_text().splitlines() if _SOURCES.exists() else [])
        if not line.startswith("#")
        and len(cols := line.rstrip("\n").split("\t")) > 4
        and cols[3] == instance.repo
        for v in cols[4].split()
        for t in (v, f"v{v}")
        if t in tags
    ]
    for tree in [instance.base_commit or "HEAD", *releases[::-1], *sorted(tags, reverse=True)]:
        if subprocess.run([*git, "read-tree", tree], env=env, capture_output=True).returncode != 0:
            continue
        patched = (
            not instance.test_patch
            or subprocess.run(
                [*git, "apply", "--cached", "-"],
                input=instance.test_patch.encode(),
                env=env,
                capture_output=True,
            ).returncode
            == 0
        )
        if patched:
            break
    fixed, globs = twins_module.search_patterns(instance)  # a row without test patch: its test files
    if fixed and patched:
        grep = [*git, "grep", "--cached", "-l", "-F", *(a for f in fixed for a in ("-e", f)), "--", *globs]
        found = subprocess.run(grep, env=env, capture_output=True, text=True).stdout.split()
        pattern = re.compile(twins_module._TEST_PATHS)
        paths = [*paths, *[p for p in found if pattern.search(p)][: twins_module.MAX_FOUND]]
    for path in paths:
        out = subprocess.run([*git, "cat-file", "blob", f":{path}"], env=env, capture_output=True)
        if patched and out.returncode == 0:
            got[path] = out.stdout.decode("utf-8", "replace")
    subprocess.run(["rm", "-f", env["GIT_INDEX_FILE"]])
    return got


def _coverage(instance: TaskInstance, sources: dict[str, str | None]) -> tuple[int, int, list[str]]:
    language = language_of(instance)
    runner = "pytest" if language is None else language.name
    plan = twins_module.plan_twins(
        instance,
        CanaryPlan(script="--no-fail-fast", nonce="n" * 32, runner=runner),
        sources,
        random.Random(0),
    )
    capped = [s for s in plan.skipped if "more than" in s.reason]
    reasons = [s.reason for s in plan.skipped if "more than" not in s.reason]
    distinct = len(plan.twins) + len(capped) + len(reasons)
    return distinct, len(plan.twins) + len(capped), reasons


def _tree_coverage(git_dirs: list[str]) -> None:
    """Every test of every Python test file at the mirrors' HEAD (a proxy for tasks whose rows are not at
    hand: which of a real suite's tests would get a twin, were they FAIL_TO_PASS)."""
    total = covered = 0
    why: Counter[str] = Counter()
    for git_dir in git_dirs:
        git = ["git", f"--git-dir={git_dir}"]
        files = subprocess.run(
            [*git, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True
        ).stdout
        mine = tested = 0
        for path in files.split():
            name = path.rsplit("/", 1)[-1]
            if not (name.startswith("test_") and name.endswith(".py")):
                continue
            text = subprocess.run([*git, "show", f"HEAD:{path}"], capture_output=True, text=True).stdout
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            ids = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
            ids += [
                f"{c.name}::{m.name}"
                for c in tree.body
                if isinstance(c, ast.ClassDef) and c.name.startswith("Test")
                for m in c.body
                if isinstance(m, ast.FunctionDef) and m.name.startswith("test")
            ]
            if not ids:
                continue
            instance = TaskInstance(instance_id="x__x-1", repo="x/x", problem_statement="x", image="x",
                                    fail_to_pass=[f"{path}::{i}" for i in ids])  # fmt: skip
            distinct, twinned, reasons = _coverage(instance, {path: text})
            tested, mine = tested + distinct, mine + twinned
            why.update(r.split(" (")[0][:90] for r in reasons)
        print(f"{git_dir:55} tests {tested:5}  with a twin {mine:5} ({100 * mine / max(tested, 1):.0f}%)")
        total, covered = total + tested, covered + mine
    print(f"tests with a twin: {covered}/{total} ({100 * covered / max(total, 1):.1f}%)")
    for reason, n in why.most_common(8):
        print(f"  skipped {n:4}: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="*", default=["data/fixtures/instances.jsonl"])
    parser.add_argument(
        "--mirrors", help="read the test files from git mirrors (owner+name/repo), not images"
    )
    parser.add_argument("--trees", nargs="*", help="git dirs: every test of their Python test files at HEAD")
    args = parser.parse_args()
    twins_module.MAX_TWINS = 10**6  # count every derivable twin (a run draws at most 4)
    if args.trees:
        _tree_coverage(args.trees)
        return
    total = covered = 0
    why: Counter[str] = Counter()
    for path in args.rows:
        for instance in load_instances(path).instances:
            sources = _mirror_sources(instance, args.mirrors) if args.mirrors else _sources(instance)
            distinct, twinned, reasons = _coverage(instance, sources)
            total, covered = total + distinct, covered + twinned
            why.update(r.split(" (")[0][:90] for r in reasons)
            print(f"{instance.instance_id:45} FAIL_TO_PASS tests {distinct:3}  with a twin {twinned:3}")
    print(f"FAIL_TO_PASS tests with a twin: {covered}/{total}")
    for reason, n in why.most_common():
        print(f"  skipped {n:3}: {reason}")


if __name__ == "__main__":
    main()
