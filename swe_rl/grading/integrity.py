"""Reward integrity: what of an agent's patch may reach the test run, and a verdict that cannot be bought.

A policy optimises what the grader pays for. Applying the whole agent patch and running
the eval script pays for a ``conftest.py`` that turns failures into passes, a
``pytest.ini`` loading such a plugin, a ``sitecustomize.py``, edited or deleted tests,
``addopts`` in ``setup.cfg``/``pyproject.toml``/``tox.ini``, skip markers, a collection
error that makes the expected tests vanish. `neutralise` removes, before the run, every
change to tests and test infrastructure and records each removed piece with its reason
(a `TamperReport`); `strict_report` judges FAIL_TO_PASS / PASS_TO_PASS so that a test that
did not run (missing, skipped, contradicting itself in the log) is a failure.

Rules, by path (the whole file diff is dropped):

- files the instance's test patch touches, and files the eval script names (runners such as ``bin/test``);
- ``conftest.py`` anywhere; ``pytest.ini``/``.pytest.ini``/``pytest.toml``/``tox.ini``;
  ``sitecustomize.py``/``usercustomize.py``; ``*.pth``; ``*.egg-info``/``*.dist-info`` metadata (entry points);
- test modules (``test_*.py``, ``*_test.py``, ``tests.py``) and files under test directories
  (``tests/``, ``test/``, and the directories of the test patch's files other than the root),
  unless the gold patch touches the same file (the fix itself needs it);
- ``setup.py`` diffs that mention ``pytest`` (a ``pytest11`` entry point).

By line (only those lines are removed; a removed line becomes context again): in ``setup.cfg`` and
``pyproject.toml``, lines inside pytest sections (``[tool:pytest]``, ``[pytest]``, ``[tool.pytest.*]``)
and any line mentioning ``pytest``. The section a line is in is read from the file at the base
commit (``originals``); a file whose original is unknown is handled as if every line were a test line.

Dropped too: a file or package named like the test runner's modules at an import root (``pytest.py``,
``_pytest/``, ``pluggy/``, ``src/pytest.py``...), which would be imported instead of the real ones.

Flagged (kept, but the integrity verdict is unresolved): added source lines that reach into the test
runner (``_pytest``, pytest hook names, ``pytest.skip/xfail/exit``, ``PYTEST_ADDOPTS``...), print
strings that look like test status lines, or call ``os._exit``, except in repos that are pytest or its
plugins (``IntegrityConfig.pytest_repos``).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.grading.capabilities import CapabilityConfig
from swe_rl.grading.log_audit import status_lines
from swe_rl.grading.patch_split import DiffHunk, FileDiff, join_patch, split_patch

__all__ = [
    "IntegrityConfig",
    "OfficialVerdict",
    "TamperRecord",
    "TamperReport",
    "neutralise",
    "section_files",
    "strict_report",
]

MAX_RECORD_CHARS = 4000


class IntegrityConfig(BaseModel):
    """How grading protects the reward (plugin keys ``swe_integrity_<key>``, eval flags)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    enable: bool = True
    """Neutralise test and test-infrastructure changes before the run and judge strictly."""
    official_verdict: bool = True
    """When something was dropped, also grade the full patch in a second fresh container (the verdict
    SWE-bench's own harness would give); otherwise both verdicts come from the one run."""
    test_dirs: list[str] = Field(default_factory=lambda: ["tests", "test"])
    """Directory names whose files are tests wherever they are."""
    flag_voids: bool = True
    """A flagged source line (reaching into the test runner) makes the integrity verdict unresolved."""
    pytest_repos: list[str] = Field(default_factory=lambda: ["pytest-dev/*"])
    """Repos (fnmatch on owner/name) whose own source is a test runner: their source is not scanned."""
    shadow_check: bool = True
    """Drop new top-level modules that would shadow the test runner's, the standard library's or an installed
    distribution's modules (``pytest.py``, ``_pytest/``, ``json.py`` at an import root)."""
    twins: bool = True
    """Plant twins of the task's FAIL_TO_PASS tests expecting what no honest code returns
    (`swe_rl.grading.twins`); a twin reported passed voids the reward."""
    capabilities: CapabilityConfig = Field(default_factory=CapabilityConfig)
    """What each capability the syntax-tree scan finds in added code does to the reward (void, flag, ignore)."""
    runner_probe: bool = True
    """Ask the runner (pytest, through a grader-owned plugin; go, node and cargo for Go, JavaScript and Rust
    rows) for its effective configuration on the clean tree and in the patched run; any difference voids the
    reward (`swe_rl.grading.runner_probe`, `swe_rl.grading.runner_probe_languages`). Costs one collect-only
    run of the tests (pytest) or one exec of the toolchain's queries (others) per graded patch."""
    run_writes: bool = True
    """List the files the test run wrote in the repository and on the import path and scan them like the
    patch (`swe_rl.grading.run_writes`): what the scan would void in a patch, and any new import hook file
    (``.pth``, ``sitecustomize``, ``conftest.py``), voids the reward."""


class TamperRecord(BaseModel):
    """One piece of the agent's patch that did not reach the test run as written."""

    path: str
    """File (repository-relative)."""
    rule: str
    """Which rule: test_patch_file, eval_script_file, conftest, pytest_settings, interpreter_hook, path_file,
    package_metadata, test_file, test_dir, setup_py_plugin, test_config_lines, runner_hook, runner_shadow,
    symlink, compiled_code, module_shadow, runner_config, capability, canary, twin, runner_probe, run_written_file; for Go, JavaScript and Rust rows
    (`swe_rl.grading.language_rules`) also start_up_hook, dependency_code, contradicted_result."""
    action: str
    """``dropped`` (the file's diff removed), ``trimmed`` (lines removed from a hunk), ``flagged`` (kept; voids
    the reward when ``flag_voids``), ``voided`` (kept; the reward is void), ``noted`` (kept, recorded only)."""
    reason: str
    """In words."""
    hunk: str = ""
    """The original diff text concerned (capped)."""


class TamperReport(BaseModel):
    """Everything `neutralise` did to one patch."""

    records: list[TamperRecord] = Field(default_factory=list)
    """One per dropped file diff, trimmed hunk or flagged hunk."""
    patch_bytes: int = 0
    """Size of the agent's patch."""
    kept_bytes: int = 0
    """Size of the patch that was run."""
    canonical_bytes: int | None = None
    """Size of the canonical patch (what ``git apply`` accepted, re-taken); None when not derived."""

    @property
    def tampered(self) -> bool:
        """Something was dropped, trimmed or flagged."""
        return bool(self.records)

    @property
    def changed(self) -> bool:
        """The patch run differs from the agent's."""
        return any(r.action in ("dropped", "trimmed") for r in self.records)

    @property
    def voiding(self) -> list[TamperRecord]:
        """Records that void the reward (flagged ones only under ``flag_voids``)."""
        return [r for r in self.records if r.action in ("flagged", "voided")]

    def summary(self) -> str:
        if not self.records:
            return ""
        rules = sorted({r.rule for r in self.records})
        files = len({r.path for r in self.records})
        return f"{len(self.records)} tamper record(s) ({', '.join(rules)}) in {files} file(s)"


class OfficialVerdict(BaseModel):
    """What SWE-bench's own harness says about the full agent patch (leaderboard parity)."""

    status: str
    resolved: bool
    message: str = ""
    source: str = "same_run"
    """``same_run`` (nothing was dropped: the integrity run is the official run, judged by the official
    rules), ``full_patch_run`` (a second fresh container ran the full patch), ``not_run`` (unknown)."""


# ----------------------------------------------------------------------------- path rules

_SETTINGS = {"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini"}
_HOOKS = {"sitecustomize.py", "usercustomize.py"}
_SECTIONED = {"setup.cfg", "pyproject.toml"}
# Modules a test run imports by name: a file or package of that name at an import root shadows them.
_RUNNER_MODULES = {
    "pytest",
    "_pytest",
    "pluggy",
    "py",
    "unittest",
    "nose",
    "nose2",
    "iniconfig",
    "coverage",
    "xdist",
    "pytest_cov",
    "site",
}


def patch_paths(patch: str) -> list[str]:
    _, files = split_patch(patch or "")
    return list(dict.fromkeys(p for fd in files for p in fd.paths))


def _names_in_script(path: str, script: str) -> bool:
    return (
        bool(script)
        and re.search(
            r"(?:^|[\s'\"=;(])(?:\./)?" + re.escape(path) + r"(?=$|[\s'\";):])", script, flags=re.MULTILINE
        )
        is not None
    )


def _path_rule(
    path: str,
    test_files: set[str],
    test_dirs: set[str],
    gold_files: set[str],
    script: str,
    config: IntegrityConfig,
) -> tuple[str, str] | None:
    """(rule, reason) when a change to this path must not reach the test run."""
    base = posixpath.basename(path)
    parts = path.split("/")
    if path in test_files:
        return "test_patch_file", "a file the instance's test patch touches"
    if base == "conftest.py":
        return "conftest", "conftest.py is loaded by pytest (hooks, fixtures, plugins)"
    if base in _SETTINGS:
        return "pytest_settings", f"{base} configures the test run"
    if base in _HOOKS:
        return "interpreter_hook", f"{base} runs at every interpreter start"
    if base.endswith(".pth"):
        return "path_file", ".pth files run code and extend sys.path at interpreter start"
    if any(p.endswith((".egg-info", ".dist-info")) for p in parts[:-1]):
        return "package_metadata", "installed package metadata (entry points load pytest plugins)"
    if _names_in_script(path, script):
        return "eval_script_file", "the eval script runs or reads this file"
    if path in gold_files:
        return None
    root = parts[1:] if parts[0] in ("src", "lib") and len(parts) > 1 else parts
    top = root[0][:-3] if len(root) == 1 and root[0].endswith(".py") else root[0] if len(root) > 1 else None
    gold_roots = {"/".join(g.split("/")[1:]) if g.split("/")[0] in ("src", "lib") else g for g in gold_files}
    fixes_it = any(g.startswith((f"{top}/", f"{top}.py")) for g in gold_roots)
    if top in _RUNNER_MODULES and config.shadow_check and not fixes_it:
        return "runner_shadow", f"{top!r} at an import root shadows the test runner's own module"
    if base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py") or base == "tests.py"):
        return "test_file", "a test module"
    dirs = parts[:-1]
    if any(d in config.test_dirs for d in dirs):
        return "test_dir", "a file under a test directory"
    if any(path.startswith(d + "/") for d in test_dirs):
        return "test_dir", "a file under a directory of the instance's tests"
    return None


# ----------------------------------------------------------------------------- line rules

_SECTION = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:[#;].*)?$")


def _test_section(name: str | None) -> bool:
    if name is None:
        return True  # unknown: treat as a test section (conservative)
    return (
        "pytest" in name.lower()
    )  # [pytest], [tool:pytest], [tool.pytest.*], [project.entry-points.pytest11]


def _section_at(original: list[str] | None, line_no: int) -> str | None:
    """The section in effect after the first `line_no` lines of the original file ('' before any header)."""
    if original is None:
        return None
    current = ""
    for text in original[: max(0, line_no)]:
        m = _SECTION.match(text)
        if m:
            current = m.group(1)
    return current


def _trim_sectioned(fd: FileDiff, original: str | None, known: bool) -> list[str]:
    """Remove test-config lines from a setup.cfg / pyproject.toml diff in place; returns removed hunks' texts."""
    orig_lines: list[str] | None = None  # unknown base content: every line counts as a test line
    if fd.is_new or original is not None or known:
        orig_lines = original.split("\n") if original is not None and not fd.is_new else []
    trimmed: list[str] = []
    kept_hunks: list[DiffHunk] = []
    shift = 0  # new-side offset of later hunks after lines were removed
    for hunk in fd.hunks:
        before = hunk.text()
        old_sec = new_sec = _section_at(orig_lines, hunk.old_start - 1 if hunk.old_len else hunk.old_start)
        out: list[str] = []
        touched = dropped_last = False
        for line in hunk.lines:
            mark, body = line[:1], line[1:]
            m = _SECTION.match(body)
            if mark == "\\":  # "\ No newline at end of file" goes with the line before it
                if not dropped_last:
                    out.append(line)
                continue
            dropped_last = False
            if mark == " " or line == "":
                if m:
                    old_sec = new_sec = m.group(1)
                out.append(line)
            elif mark == "-":
                if m:
                    old_sec = m.group(1)
                if _test_section(old_sec) or "pytest" in body.lower():
                    out.append(" " + body)  # keep the original line
                    if m:
                        new_sec = old_sec
                    touched = True
                else:
                    out.append(line)
            else:  # "+"
                sec = m.group(1) if m else new_sec
                new_sec = sec
                if _test_section(sec) or "pytest" in body.lower():
                    touched = dropped_last = (
                        True  # drop the added line (a header too: its keys follow it out)
                    )
                    continue
                out.append(line)
        if touched:
            trimmed.append(before)
            hunk.lines = out
            new_len_before = hunk.new_len
            hunk.recount()
            hunk.new_start += shift
            shift += hunk.new_len - new_len_before
            if hunk.changes:
                kept_hunks.append(hunk)
            continue
        hunk.new_start += shift
        kept_hunks.append(hunk)
    fd.hunks = kept_hunks
    return trimmed


# ----------------------------------------------------------------------------- source scan

_RUNNER_HOOK = re.compile(
    r"\b_pytest\b|\bpytest_(?:runtest|collect|collection|configure|unconfigure|sessionstart|sessionfinish|report|"
    r"terminal|make|pycollect|itemcollected|deselected|ignore_collect|addoption|cmdline|load_initial_conftests|"
    r"plugin_registered|pyfunc_call|assertrepr)\w*|\bpytest\.(?:skip|xfail|exit|importorskip)\b|"
    r"PYTEST_(?:ADDOPTS|PLUGINS|DISABLE_PLUGIN_AUTOLOAD|CURRENT_TEST)|sys\.modules\[\s*['\"]_?pytest|"
    r"\bunittest\.(?:TestCase|TestResult|TextTestResult|TextTestRunner)\.\w+\s*=(?!=)|\bpytest\.hookimpl\b|"
    r"['\"](?:PASSED|XFAIL|XPASS) |\bos\._exit\b"
)


def _flag_source(fd: FileDiff) -> str | None:
    if not fd.path.endswith(".py"):
        return None
    for hunk in fd.hunks:
        for line in hunk.lines:
            if line.startswith("+") and _RUNNER_HOOK.search(line):
                return line[1:].strip()[:200]
    return None


# ----------------------------------------------------------------------------- neutralise


def section_files(patch: str) -> list[str]:
    """Files whose base-commit content `neutralise` needs (setup.cfg / pyproject.toml being changed)."""
    _, files = split_patch(patch or "")
    return [fd.old_path for fd in files if fd.old_path and posixpath.basename(fd.old_path) in _SECTIONED]


def _cap(text: str) -> str:
    return text if len(text) <= MAX_RECORD_CHARS else text[:MAX_RECORD_CHARS] + "\n[... cut ...]"


def neutralise(
    patch: str,
    *,
    test_patch: str = "",
    gold_patch: str = "",
    eval_script: str = "",
    repo: str = "",
    originals: Mapping[str, str | None] | None = None,
    config: IntegrityConfig | None = None,
) -> tuple[str, TamperReport]:
    """(the patch the test run may see, what was removed or flagged and why).

    ``originals`` maps the `section_files` to their text at the base commit (None: no such file).
    """
    config = config or IntegrityConfig()
    originals = originals or {}
    preamble, files = split_patch(patch or "")
    test_files = set(patch_paths(test_patch))
    test_dirs = {posixpath.dirname(p) for p in test_files} - {""}
    gold_files = set(patch_paths(gold_patch))
    scan_source = not any(fnmatch.fnmatch(repo, pat) for pat in config.pytest_repos)
    if not scan_source:
        config = config.model_copy(update={"shadow_check": False})
    report = TamperReport(patch_bytes=len((patch or "").encode()))
    kept: list[FileDiff] = []
    for fd in files:
        rule = next(
            (
                r
                for p in fd.paths
                if (r := _path_rule(p, test_files, test_dirs, gold_files, eval_script, config))
            ),
            None,
        )
        if rule is None and posixpath.basename(fd.path) == "setup.py" and "pytest" in fd.text().lower():
            rule = ("setup_py_plugin", "setup.py changes mentioning pytest (plugin entry points)")
        if rule is not None:
            report.records.append(
                TamperRecord(
                    path=fd.path, rule=rule[0], action="dropped", reason=rule[1], hunk=_cap(fd.text())
                )
            )
            continue
        if (
            posixpath.basename(fd.path) in _SECTIONED
            and fd.old_path != fd.new_path
            and fd.old_path is not None
        ):
            # a renamed or deleted setup.cfg/pyproject.toml: nothing to trim line by line, drop it
            report.records.append(
                TamperRecord(
                    path=fd.path,
                    rule="test_config_lines",
                    action="dropped",
                    reason="renamed or deleted project settings file",
                    hunk=_cap(fd.text()),
                )
            )
            continue
        if posixpath.basename(fd.path) in _SECTIONED and fd.hunks:
            known = fd.old_path in originals or fd.is_new
            for text in _trim_sectioned(fd, originals.get(fd.old_path or ""), known):
                report.records.append(
                    TamperRecord(
                        path=fd.path,
                        rule="test_config_lines",
                        action="trimmed",
                        reason="lines in pytest sections or mentioning pytest"
                        + ("" if known else " (base content unknown)"),
                        hunk=_cap(text),
                    )
                )
            if not fd.hunks and not any(
                x.startswith(("new file mode", "deleted file mode", "old mode")) for x in fd.header
            ):
                continue
        if scan_source and (hit := _flag_source(fd)) is not None:
            report.records.append(
                TamperRecord(
                    path=fd.path,
                    rule="runner_hook",
                    action="flagged",
                    reason=f"source reaches into the test runner: {hit}",
                    hunk=_cap(fd.text()),
                )
            )
        kept.append(fd)
    out = join_patch(preamble, kept)
    report.kept_bytes = len(out.encode())
    return out, report


# ----------------------------------------------------------------------------- strict verdict

_OK = ("PASSED", "XFAIL")


def contradicted_tests(log: str, tests: set[str]) -> set[str]:
    """Expected tests that the log reports with more than one status (printed lines forging a result),
    and those of a test file whose collection failed (``ERROR path/to/test_file.py``).

    Every line the official pytest parser reads counts, whatever whitespace separates its words
    (`swe_rl.grading.log_audit.status_lines`): a line printed after pytest's own with a tab or a
    Unicode space would flip the official last-line-wins reading, so it must be seen here too."""
    seen: dict[str, set[str]] = {}
    broken_files = set()
    for line in status_lines(log):
        if line.test in tests:
            seen.setdefault(line.test, set()).add(line.status)
        elif line.status == "ERROR" and "::" not in line.test:
            broken_files.add(line.test)
    bad = {t for t, s in seen.items() if len(s) > 1}
    return bad | {t for t in tests if t.split("::", 1)[0] in broken_files}


def strict_report(
    statuses: Mapping[str, str],
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    log: str = "",
    also_contradicted: set[str] | None = None,
) -> tuple[list[str], list[str], list[str], list[str], str]:
    """(F2P success, F2P failure, P2P success, P2P failure, note): an expected test passes only when the log
    says PASSED (or XFAIL, as SWE-bench counts it) and nothing contradicts it; missing, skipped, errored and
    contradicted tests fail. ``also_contradicted``: tests another language's parser saw twice."""
    contradicted = contradicted_tests(log, set(fail_to_pass) | set(pass_to_pass)) if log else set()
    contradicted |= also_contradicted or set()

    def split(tests: list[str]) -> tuple[list[str], list[str]]:
        ok: list[str] = []
        bad: list[str] = []
        for t in tests:
            (ok if statuses.get(t) in _OK and t not in contradicted else bad).append(t)
        return ok, bad

    f_ok, f_bad = split(fail_to_pass)
    p_ok, p_bad = split(pass_to_pass)
    expected = list(fail_to_pass) + list(pass_to_pass)
    missing = sum(1 for t in expected if t not in statuses)
    skipped = sum(1 for t in expected if statuses.get(t) == "SKIPPED")
    notes = []
    if missing:
        notes.append(f"{missing} expected test(s) did not run")
    if skipped:
        notes.append(f"{skipped} skipped")
    if contradicted:
        notes.append(
            f"{len(contradicted)} contradicted in the log (two statuses, or their file failed to collect)"
        )
    return f_ok, f_bad, p_ok, p_bad, "; ".join(notes)
