#!/usr/bin/env python3
"""False positives of the tree rules (grading stage 2) on honest patches (SWE-bench Verified gold patches).

Reads dataset rows (a JSON list or JSONL; ``instance_id``, ``repo``, ``base_commit``, the patch in
``patch`` or ``golden_patch``; ``test_patch`` and ``version`` when the export has them), builds for each
patch the `TreeChange` list and `InterpreterFacts` the canonical stage (swe_rl/grading/patch/canonical.py)
would hand on, runs the real `judge_tree`, and prints how many patches would have anything dropped,
trimmed or flagged, each with the rule and why. The data set is not part of the project: point
``--rows`` at an export of it.

What is approximated (the grading container is not run):

- changes come from the patch's own headers (``new file mode``, ``deleted file mode``, ``old mode``/
  ``new mode``, ``120000`` symlinks); the canonical text is the patch itself;
- contents: the base-commit file from a local git mirror (``--mirrors``: ``owner+name/repo`` or
  ``owner+name.git``) and the patch applied to it; without a mirror a new file's content is its hunks
  and a modified file's content is unknown (the rules treat unknown settings content as changed: such
  rows are marked ``[no mirror]``);
- interpreter: the standard library is this machine's ``sys.stdlib_module_names``; the installed
  distributions are the repository's own top-level packages (from the mirror's base tree, or
  `OWN_PACKAGES`) plus `COMMON_DEPENDENCIES` (the repository's usual requirements and the test tools of
  the SWE-bench images), not what the image really has; the import roots are the repository's top,
  ``src`` and ``lib`` as listed at the base commit;
- the eval script: `swe_rl.tasks.eval_script_for` when the row has ``test_patch`` and ``version``;
  otherwise the repository's test commands from swebench's specs (every version), which name the
  runner files (``tests/runtests.py``, ``bin/test``) but not the test files of the test patch;
- the gold exemption: the pipeline spares the files the instance's gold patch touches from the test-file,
  test-directory and shadow rules. Judging a gold patch against itself would spare all of it, so by
  default the instance is given **no** gold patch (the rules alone, as for an honest patch that touches
  other files than the gold, or a data set without gold); ``--with-gold`` gives it the gold patch.

    python bench/tree_rule_false_positives.py --rows verified.json --mirrors /work/.mirror
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from swe_rl.grading.integrity import IntegrityConfig, TamperRecord
from swe_rl.grading.patch.canonical import CanonicalPatch, InterpreterFacts, TreeChange
from swe_rl.grading.patch.split import FileDiff, split_patch
from swe_rl.grading.scans.tree import judge_tree
from swe_rl.tasks import EvalSpecUnavailable, TaskInstance, eval_script_for

# the capability bench's row and mirror helpers (run as a script: bench/ is on sys.path; imported: bench.*)
_helpers = importlib.import_module(
    f"{__package__}.capability_false_positives" if __package__ else "capability_false_positives"
)
apply_hunks, base_file, load_rows, mirror_of, select_rows = (
    _helpers.apply_hunks,
    _helpers.base_file,
    _helpers.load_rows,
    _helpers.mirror_of,
    _helpers.select_rows,
)

OWN_PACKAGES: dict[str, list[str]] = {
    "astropy/astropy": ["astropy"],
    "django/django": ["django"],
    "matplotlib/matplotlib": ["matplotlib", "mpl_toolkits", "pylab"],
    "mwaskom/seaborn": ["seaborn"],
    "pallets/flask": ["flask"],
    "psf/requests": ["requests"],
    "pydata/xarray": ["xarray"],
    "pylint-dev/pylint": ["pylint"],
    "pytest-dev/pytest": ["pytest", "_pytest"],
    "scikit-learn/scikit-learn": ["sklearn"],
    "sphinx-doc/sphinx": ["sphinx"],
    "sympy/sympy": ["sympy"],
}
"""The repository's own import names (installed in the image in develop mode)."""
_TOOLS = [
    "pip",
    "setuptools",
    "pkg_resources",
    "_distutils_hack",
    "wheel",
    "pytest",
    "_pytest",
    "pluggy",
    "py",
]
_TOOLS += ["iniconfig", "packaging", "tomli", "attr", "attrs", "exceptiongroup", "hypothesis", "coverage"]
COMMON_DEPENDENCIES: dict[str, list[str]] = {
    "astropy/astropy": ["numpy", "erfa", "yaml", "pytest_astropy", "pytest_doctestplus", "pytest_remotedata"],
    "django/django": ["asgiref", "sqlparse", "pytz", "tblib", "PIL", "yaml", "jinja2", "argon2", "bcrypt"],
    "matplotlib/matplotlib": ["numpy", "cycler", "kiwisolver", "PIL", "pyparsing", "dateutil", "fontTools"],
    "mwaskom/seaborn": ["numpy", "pandas", "matplotlib", "scipy", "statsmodels"],
    "pallets/flask": ["werkzeug", "jinja2", "itsdangerous", "click", "markupsafe"],
    "psf/requests": ["urllib3", "chardet", "idna", "certifi"],
    "pydata/xarray": ["numpy", "pandas", "scipy", "dask", "netCDF4", "cftime"],
    "pylint-dev/pylint": ["astroid", "isort", "mccabe", "platformdirs", "tomlkit", "dill", "wrapt"],
    "pytest-dev/pytest": ["more_itertools", "six", "wcwidth", "xmlschema", "nose", "mock"],
    "scikit-learn/scikit-learn": ["numpy", "scipy", "joblib", "threadpoolctl", "Cython"],
    "sphinx-doc/sphinx": ["docutils", "jinja2", "pygments", "babel", "alabaster", "imagesize", "requests"],
    "sympy/sympy": ["mpmath"],
}
"""Import names of the repository's usual requirements (a guess of the image's distributions); plus `_TOOLS`."""


def _blob(text: str) -> str:
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _modes(fd: FileDiff) -> tuple[str, str, str]:
    """(kind, old mode, new mode) from a file diff's git header."""
    old = new = "100644"
    kind = "added" if fd.old_path is None else "deleted" if fd.new_path is None else "modified"
    for line in fd.header:
        word, _, mode = line.partition(" mode ")
        if word in ("new file", "new"):
            new = mode.strip()
        elif word in ("deleted file", "old"):
            old = mode.strip()
    if kind == "added":
        old = "000000"
    if kind == "deleted":
        new = "000000"
    if kind == "modified" and (old == "120000") != (new == "120000"):
        kind = "type_changed"
    return kind, old, new


def _top_listing(git_dir: Path, commit: str, folder: str) -> list[str] | None:
    res = subprocess.run(
        [
            "git",
            "--git-dir",
            str(git_dir),
            "ls-tree",
            "--name-only",
            f"{commit}:{folder}" if folder else commit,
        ],
        capture_output=True,
        check=False,
    )
    return res.stdout.decode("utf-8", "replace").split() if res.returncode == 0 else None


def _own_packages(git_dir: Path | None, row: dict, top: list[str] | None) -> list[str]:
    names = list(OWN_PACKAGES.get(row["repo"], []))
    if git_dir is not None and top:
        for root in ("", "src", "lib"):
            listing = top if not root else _top_listing(git_dir, row["base_commit"], root) or []
            for name in listing:
                path = f"{root}/{name}" if root else name
                if base_file(git_dir, row["base_commit"], f"{path}/__init__.py") is not None:
                    names.append(name)
    return names


def _gold(row: dict) -> str:
    return row.get("patch") or row.get("golden_patch") or ""


def canonical_of(row: dict, mirrors: Path | None) -> tuple[CanonicalPatch, bool]:
    """(the canonical stage's result as approximated, whether base contents came from a mirror) for the
    row's ``agent_patch`` if it has one, else its gold patch."""
    patch = row.get("agent_patch") or _gold(row)
    git_dir = mirror_of(mirrors, row["repo"]) if mirrors else None
    changes: list[TreeChange] = []
    blobs: dict[str, bytes] = {}
    for fd in split_patch(patch)[1]:
        kind, old_mode, new_mode = _modes(fd)
        before = None
        if kind != "added" and git_dir is not None:
            before = base_file(git_dir, row["base_commit"], fd.old_path or "")
        hunks = [(h.old_start, [x[1:] for x in h.lines if x[:1] in " -"], [x[1:] for x in h.lines if x[:1] in " +"])
                 for h in fd.hunks]  # fmt: skip
        after = None
        if kind != "deleted" and (before is not None or kind == "added"):
            after = apply_hunks(before or "", hunks)
        old_blob = new_blob = "0" * 40
        if kind != "added":
            old_blob = (
                _blob(before) if before is not None else hashlib.sha1(f"old:{fd.path}".encode()).hexdigest()
            )
        if kind != "deleted":
            new_blob = (
                _blob(after) if after is not None else hashlib.sha1(f"new:{fd.path}".encode()).hexdigest()
            )
        for blob, text in ((old_blob, before), (new_blob, after)):
            if text is not None:
                blobs[blob] = text.encode("utf-8")
        changes.append(
            TreeChange(
                path=fd.path,
                kind=kind,
                old_mode=old_mode,
                new_mode=new_mode,
                old_blob=old_blob,
                new_blob=new_blob,
            )
        )
    roots: dict[str, list[str]] = {}
    top = _top_listing(git_dir, row["base_commit"], "") if git_dir is not None else None
    if git_dir is not None and top is not None:
        roots[""] = top
        for folder in ("src", "lib"):
            if folder in top and (listing := _top_listing(git_dir, row["base_commit"], folder)) is not None:
                roots[folder] = listing
    distributions = sorted(
        {*_own_packages(git_dir, row, top), *COMMON_DEPENDENCIES.get(row["repo"], []), *_TOOLS}
    )
    facts = InterpreterFacts(
        python="approximation",
        version=sys.version.split()[0],
        stdlib=sorted(getattr(sys, "stdlib_module_names", ())),
        distributions=distributions,
        import_roots=roots,
    )
    return CanonicalPatch(
        applied=True, text=patch, changes=changes, blobs=blobs, interpreter=facts
    ), git_dir is not None


def eval_script_of(row: dict, instance: TaskInstance) -> tuple[str, str]:
    """(script, how it was obtained)."""
    if instance.test_patch and instance.version:
        try:
            return eval_script_for(instance), "swebench"
        except EvalSpecUnavailable:
            pass
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    except ImportError:
        return "", "none"
    specs = MAP_REPO_VERSION_TO_SPECS.get(row["repo"], {})
    commands = sorted({str(spec.get("test_cmd")) for spec in specs.values() if spec.get("test_cmd")})
    return "\n".join(commands), "test commands"


def judge_row(
    row: dict, mirrors: Path | None, with_gold: bool = False
) -> tuple[bool, str, list[TamperRecord]]:
    """(base contents from a mirror, where the eval script came from, the tree rules' records) of one row."""
    patch = _gold(row)
    instance = TaskInstance(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row.get("base_commit", ""),
        problem_statement=row.get("problem_statement") or "-",
        patch=patch if with_gold else "",
        test_patch=row.get("test_patch") or "",
        version=str(row.get("version") or ""),
        image="none",
    )
    canon, mirrored = canonical_of(row, mirrors)
    script, origin = eval_script_of(row, instance)
    verdict = judge_tree(canon, instance, script, IntegrityConfig())
    return mirrored, origin, verdict.records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", required=True, type=Path, help="dataset rows (.json list or .jsonl)")
    p.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"), help="folder of git mirrors")
    p.add_argument("--with-gold", action="store_true", help="give the instance its gold patch (files spared)")
    p.add_argument(
        "--agent-patches",
        action="store_true",
        help="judge the agents' resolving patches of each row (``resolved_by``: [{name, patch}]) instead of gold; "
        "the gold patch stays the instance's (use with --with-gold for the pipeline's own exemption)",
    )
    p.add_argument("--sample", type=int, help="judge only this many rows, spread evenly over the file")
    p.add_argument("--json", type=Path, help="write every record here")
    args = p.parse_args(argv)
    rows = select_rows(load_rows(args.rows), args.sample, "agent_patch" if args.agent_patches else None)
    modes: Counter[str] = Counter()
    scripts: Counter[str] = Counter()
    per_rule: Counter[tuple[str, str]] = Counter()
    hit, dump = [], {}
    for row in rows:
        mirrored, origin, records = judge_row(row, args.mirrors, args.with_gold)
        modes["mirror" if mirrored else "no mirror"] += 1
        scripts[origin] += 1
        per_rule.update({(r.rule, r.action) for r in records})
        dump[row["instance_id"]] = [r.model_dump() for r in records]
        if records:
            hit.append((row["instance_id"], mirrored, records))
    print(f"patches: {len(rows)} (mirror: {modes['mirror']}, no mirror: {modes['no mirror']}); "
          f"eval script from: {dict(scripts)}; gold exemption: {'on' if args.with_gold else 'off'}")  # fmt: skip
    share = 100 * len(hit) / max(len(rows), 1)
    print(f"patches with something dropped, trimmed or flagged: {len(hit)} ({share:.1f}%)")
    for instance_id, mirrored, records in hit:
        for r in records:
            tag = "" if mirrored else " [no mirror]"
            print(f"  {instance_id}{tag} {r.path}: {r.rule} {r.action}: {r.reason}")
    print("patches with a record, per rule (action):")
    for (rule, action), count in sorted(per_rule.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {rule:22} {action:8} {count}")
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
