"""Reward integrity: what of an agent's patch may reach the test run, and a verdict that cannot be bought.

A policy optimises what the grader pays for. Applying the whole agent patch and running
the eval script pays for a ``conftest.py`` that turns failures into passes, a
``pytest.ini`` loading such a plugin, a ``sitecustomize.py``, edited or deleted tests,
``addopts`` in ``setup.cfg``/``pyproject.toml``/``tox.ini``, skip markers, a collection
error that makes the expected tests vanish. `neutralise` removes, before the run, every
change to tests and test infrastructure and records each removed piece with its reason
(a `TamperReport`); `strict_report` (`swe_rl.grading.verdict.strict`, re-exported here) judges
FAIL_TO_PASS / PASS_TO_PASS so that a test that did not run (missing, skipped, contradicting itself
in the log) is a failure.

Rules, by path (the whole file diff is dropped):

- files the instance's test patch touches, and files the eval script names (runners such as ``bin/test``);
- ``conftest.py`` anywhere; ``pytest.ini``/``.pytest.ini``/``pytest.toml``/``tox.ini``;
  ``sitecustomize.py``/``usercustomize.py``; ``*.pth``; ``*.egg-info``/``*.dist-info`` metadata (entry points);
- test modules (``test_*.py``, ``*_test.py``, ``tests.py``) and files under test directories
  (``tests/``, ``test/``, and the directories of the test patch's files other than the root),
  unless the gold patch touches the same file (the fix itself needs it);
- ``setup.py`` diffs that mention ``pytest`` (a ``pytest11`` entry point).

By line (`swe_rl.grading.scans.config_lines`; only those lines are removed, a removed line becomes context
again): in ``setup.cfg`` and ``pyproject.toml``, lines inside pytest sections (``[tool:pytest]``,
``[pytest]``, ``[tool.pytest.*]``) and any line mentioning ``pytest``. The section a line is in is read from the file at the base
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

from swe_rl.grading.patch.split import FileDiff, join_patch, split_patch
from swe_rl.grading.scans.capabilities import CapabilityConfig
from swe_rl.grading.scans.config_lines import trim_sectioned
from swe_rl.grading.verdict.strict import contradicted_tests, strict_report

__all__ = [
    "IntegrityConfig",
    "OfficialVerdict",
    "TamperRecord",
    "TamperReport",
    "contradicted_tests",
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
    (`swe_rl.grading.twins.plant`); a twin reported passed voids the reward."""
    capabilities: CapabilityConfig = Field(default_factory=CapabilityConfig)
    """What each capability the syntax-tree scan finds in added code does to the reward (void, flag, ignore)."""
    runner_probe: bool = True
    """Ask the runner (pytest, through a grader-owned plugin; go, node and cargo for Go, JavaScript and Rust
    rows) for its effective configuration on the clean tree and in the patched run; any difference voids the
    reward (`swe_rl.grading.runner.probe`, `swe_rl.grading.runner.probe_languages`). Costs one collect-only
    run of the tests (pytest) or one exec of the toolchain's queries (others) per graded patch."""
    run_writes: bool = True
    """List the files the test run wrote in the repository and on the import path and scan them like the
    patch (`swe_rl.grading.scans.run_writes`): what the scan would void in a patch, and any new import hook file
    (``.pth``, ``sitecustomize``, ``conftest.py``), voids the reward."""


class TamperRecord(BaseModel):
    """One piece of the agent's patch that did not reach the test run as written."""

    path: str
    """File (repository-relative)."""
    rule: str
    """Which rule: test_patch_file, eval_script_file, conftest, pytest_settings, interpreter_hook, path_file,
    package_metadata, test_file, test_dir, setup_py_plugin, test_config_lines, runner_hook, runner_shadow,
    symlink, compiled_code, module_shadow, runner_config, capability, canary, twin, runner_probe, run_written_file, run_imported_module; for Go, JavaScript and Rust rows
    (`swe_rl.grading.scans.tree_languages`) also start_up_hook, dependency_code, contradicted_result."""
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
            for text in trim_sectioned(fd, originals.get(fd.old_path or ""), known):
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
