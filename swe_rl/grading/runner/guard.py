"""The runner checks itself, and every module the run imports was read (part of the runner probe's plugin).

The probe plugin of `runner_probe` reports the runner's *configuration*; a patch that changes the
runner's *code* at run time (``import pytest; r = pytest.TestReport`` in a helper, then
``setattr(r, "from_item_and_call", ...)``; ``pytest.Function.runtest``; ``unittest.TestCase.assertEqual``;
a plugin registered on the first test's run) or imports code no scan read (a module written from a
``.txt`` at import time and deleted, a ``.py`` under ``__pycache__``) leaves the configuration as it was.
So the plugin also carries `GUARD_SOURCE`, which:

- **records the runner's machinery when the plugin is imported** (``-p`` on the command line: before
  conftests, entry-point plugins and any code of the package the tests import): every callable of the
  modules in `runner_guard_plugin.MACHINERY` and of the classes they define (`pytest`'s re-exports, report construction,
  ``CallInfo``, ``runtest``, the session's loop, the unittest plugin, skipping/xfail, the terminal
  reporter, pluggy's hook callers and ``_multicall``, ``unittest``'s ``TestCase`` and result classes),
  each as the object itself, its ``__code__``, ``__defaults__`` and ``__kwdefaults__``; the plugin
  manager's own callables; every hook caller's type, executor and implementations (plugin and function);
- **compares after collection** what changed since (``collected.machinery``): the task's own conftests
  register hooks there, so this list is compared with the clean tree's like the rest of the snapshot;
- **takes a second record at collection's end** (plus, per collected item, its class and its test
  function with that function's code) and checks it **before every test's call report is made** (a hook
  wrapper of ``pytest_runtest_makereport``, which runs before pytest's own report construction, so a
  replacement made in the test's setup, call or the previous teardown is seen before it is used), for the
  item (an instance ``runtest``, a swapped test function or ``__code__``) and at the session's end; any
  difference is a ``run`` change and voids (`guard_records`); a session whose end was never reported
  voids too (the hooks were bypassed). The check compares flat lists by identity at C speed
  (``map(operator.is_, ...)``: an object's own ``__eq__`` is never asked) and runs the full comparison
  only when something moved, and always at the session's end; on Python 3.8+ an audit hook sees every
  ``__code__``/``__defaults__`` set on a watched function **when it happens** (a change undone before the
  next check is still seen), so the per-test check leaves out reading ``__code__`` (itself an audited
  event). The watched classes' namespaces are compared at every check: Python audits a write to a class's
  special attributes only (``__module__``, ``__doc__``, ``__qualname__``, ``__bases__``), never to its
  methods (session 20 found the check had relied on it: a method replaced during a test and put back
  before the session's end went unseen wherever no raw-memory module was loaded, as in a task image; this
  machine's pytest plugins load ctypes, which hid it from the tests; about 0.1 ms per test, 143 classes).
  A route around the audited writes (gc's ``get_referents``/``get_referrers``/``get_objects``, ctypes or
  cffi imported, a file named ``mem`` opened, a symlink or hard link made, another process started)
  makes every later check read the functions' code too;
- **follows every module imported after the plugin**: at each checkpoint, the file behind each new module
  in ``sys.modules``, its state (``gone``: deleted by then; ``written``: its ctime or mtime is not older
  than a marker the plugin wrote when imported; ``pycache``: the file lies under ``__pycache__``;
  ``not_source``: a module whose file is not Python source or an extension) and, for a written or gone
  file, the source as the interpreter read it (an audit hook on ``open`` keeps the bytes of every
  ``.py`` opened that is new since the marker, Python 3.8+; before that, what is on disk at the check).

The grader (`imported_records`) voids a module under ``__pycache__``, a module of the repository that was
deleted or is not Python source, a compiled module written in the repository; a written or deleted
source file is scanned like a patch (`run_writes.written_records`); what lies outside the repository
and predates the run (the image's packages) is the image's. Limits: the plugin lives in the process it
checks (code that finds it can read its key and sign what it likes; the capability scan flags the
reach); a ``.pyc`` written at run time beside an unchanged source is not caught; repositories that are a
test runner themselves (`IntegrityConfig.pytest_repos`) change the runner's machinery in their own tests,
so there run-time changes are noted, not voided.
"""

from __future__ import annotations

import fnmatch
import posixpath
from typing import Any

from swe_rl.grading.integrity import TamperRecord
from swe_rl.grading.runner.guard_plugin import GUARD_SOURCE, MAX_CHANGES, MAX_IMPORTS

__all__ = ["GUARD_SOURCE", "guard_records", "imported_records"]


def _runner_repo(repo: str, pytest_repos: list[str]) -> bool:
    return any(fnmatch.fnmatch(repo, pattern) for pattern in pytest_repos)


def guard_records(
    clean_finished: bool, patched: dict[str, Any], finished: bool, repo: str, pytest_repos: list[str]
) -> list[TamperRecord]:
    """The run-time checks of the patched run (`patched`: the report's ``run`` part): a change of the
    runner's machinery after collection voids (noted on a test runner's own repository), and so does a
    run whose session end was never reported when the clean tree's was."""
    action = "noted" if _runner_repo(repo, pytest_repos) else "voided"
    out = [
        TamperRecord(
            path="",
            rule="runner_probe",
            action=action,
            reason=f"the runner's machinery changed during the run: {change}",
        )
        for change in (patched.get("changes") or [])[:MAX_CHANGES]
    ]
    if clean_finished and not finished:
        out.append(
            TamperRecord(
                path="",
                rule="runner_probe",
                action="voided",
                reason="the patched run never reported its session's end (stopped early, or the runner's "
                "hooks were bypassed)",
            )
        )
    return out


def imported_records(workdir: str, patched: dict[str, Any]) -> tuple[list[TamperRecord], dict[str, bytes]]:
    """The modules the run imported from files no scan read: records that void outright, and the sources
    to scan like a patch (absolute path -> bytes: written or deleted during the run, text captured)."""
    root = workdir.rstrip("/") + "/"
    records: list[TamperRecord] = []
    scan: dict[str, bytes] = {}
    for entry in (patched.get("imports") or [])[:MAX_IMPORTS]:
        path, state, module = str(entry.get("path", "")), entry.get("state", ""), entry.get("module", "")
        text = entry.get("text")
        inside = path.startswith(root)
        rel = path[len(root) :] if inside else path
        binary = not posixpath.basename(path).endswith((".py", ".pyw"))

        def void(why: str, rel: str = rel, module: str = module) -> None:
            records.append(
                TamperRecord(path=rel, rule="run_imported_module", action="voided", reason=f"{module}: {why}")
            )

        if state == "pycache":
            void("imported from a file under __pycache__ (no scan reads there)")
        elif state == "gone" and inside:
            void("imported from a file of the repository deleted during the run")
        elif state == "not_source" and inside:
            void("imported from a file of the repository that is not Python source")
        elif state == "written" and inside and binary:
            void("imported from a compiled module written in the repository during the run")
        elif isinstance(text, str) and not binary:
            scan[path] = text.encode("utf-8", "surrogateescape")
        elif state in ("gone", "written", "not_source"):
            records.append(
                TamperRecord(
                    path=rel,
                    rule="run_imported_module",
                    action="noted",
                    reason=f"{module}: imported from a file outside the repository ({state}), not read",
                )
            )
    return records, scan
