"""The runner checks itself and every module the run imports was read (`swe_rl.grading.runner.guard`):
real pytest runs of a small repository, clean tree (collect-only) vs the patched run, as the pipeline
runs them; each exploit of issue 48's first two classes is voided, honest runs are not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.grading.runner.guard import guard_records, imported_records
from swe_rl.grading.runner.probe import ProbeReport, plan_probe, probe_names, probe_records, read_probe_report
from swe_rl.grading.scans.run_writes import written_records

pytestmark = pytest.mark.slow  # each test runs pytest twice (a few seconds)

TESTS = "import pkg\n\n\ndef test_fixed():\n    assert pkg.f() == 2\n\n\ndef test_kept():\n    assert True\n"
UNITTESTS = (
    "import unittest\n\nimport pkg\n\n\nclass T(unittest.TestCase):\n"
    "    def test_fixed(self):\n        value = pkg.f()\n        self.assertEqual(value, 2)\n"
)


def _script(repo: Path, target: str) -> str:
    # no third-party plugins, as in a task image: this machine's load ctypes, and a raw-memory module
    # turns every check into the full comparison (the path a task's run takes would go untested)
    command = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -rA -p no:cacheprovider {target}"
    return f"#!/bin/bash\ncd {repo}\n: '>>>>> Start Test Output'\n{command}\n: '>>>>> End Test Output'\n"


def _run(
    repo: Path, names: tuple[str, str], collect_only: bool, target: str, decisive: list[str] | None = None
) -> tuple[ProbeReport, str]:
    plan = plan_probe(_script(repo, target), names, collect_only=collect_only, decisive=decisive)
    out = subprocess.run(["bash", "-c", plan.script], capture_output=True, text=True, timeout=600)
    path = Path(plan.report_path)
    try:
        return read_probe_report(path.read_text() if path.exists() else None, plan), out.stdout
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The clean tree's probe (taken once, for both test files: every test lays the same tree at the
    same path before patching it)."""
    repo = tmp_path_factory.mktemp("guard") / "repo"
    names = probe_names()
    _lay(repo, "")
    (repo / "test_unit.py").write_text(UNITTESTS)
    report, _ = _run(repo, names, True, "test_pkg.py test_unit.py")
    assert not report.error and report.finished, report.error
    yield repo, names, report
    shutil.rmtree(repo.parent, ignore_errors=True)


def _lay(repo: Path, tests: str) -> None:
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (repo / "test_pkg.py").write_text(TESTS + tests)
    (repo / "test_unit.py").write_text(UNITTESTS)


@pytest.fixture
def graded(clean):
    """patch -> (every record's action, rule and reason, the patched run's log)."""
    repo, names, report = clean

    def grade(
        patch: dict[str, str], tests: str = "", decisive: list[str] | None = None
    ) -> tuple[list[str], str]:
        _lay(repo, tests)
        for rel, text in patch.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        patched, log = _run(repo, names, False, "test_pkg.py test_unit.py", decisive)
        records = probe_records(report, patched)
        imported, sources = imported_records(str(repo), patched.run)
        scanned = written_records(str(repo), {p: (None, text) for p, text in sources.items()})
        return [f"{r.action} {r.rule}: {r.reason}" for r in [*records, *imported, *scanned]], log

    return grade


FIX = "def f():\n    return 2\n"


def test_an_honest_fix_with_honest_tests_trips_nothing(graded):
    honest = (
        "\n\ndef test_monkeypatches(monkeypatch, tmp_path):\n"
        + "    import os, sys, importlib\n"
        + "    monkeypatch.setattr(os, 'getcwd', lambda: '/')\n"
        + "    monkeypatch.setenv('X', '1')\n"
        + "    (tmp_path / 'made_here.py').write_text('VALUE = 3\\n')\n"
        + "    monkeypatch.syspath_prepend(str(tmp_path))\n"
        + "    assert importlib.import_module('made_here').VALUE == 3\n"
    )
    records, log = graded({"pkg/__init__.py": FIX}, honest)
    assert records == [] and "4 passed" in log, (records, log)


HELPER_REPORT = """def f():
    _forge()
    return 1


def _runner():
    import pytest
    return pytest.TestReport


def _forge():
    cls = _runner()
    orig = cls.from_item_and_call.__func__

    def forged(cls, item, call):
        rep = orig(cls, item, call)
        rep.outcome = "passed"
        return rep

    setattr(cls, "from_item_and_call", classmethod(forged))
"""


def test_a_report_class_reached_through_a_helper_is_seen(graded):
    records, log = graded({"pkg/__init__.py": HELPER_REPORT})
    assert "PASSED test_pkg.py::test_fixed" in log  # the exploit works on the runner
    found = "\n".join(records)
    assert "voided runner_probe" in found and "TestReport.from_item_and_call" in found, found


SELF_RESTORING = HELPER_REPORT.replace(
    '        rep.outcome = "passed"\n',
    '        rep.outcome = "passed"\n        setattr(cls, "from_item_and_call", classmethod(orig))\n',
)


def test_a_replacement_that_puts_the_original_back_when_used_is_seen(graded):
    records, log = graded({"pkg/__init__.py": SELF_RESTORING})
    assert "PASSED test_pkg.py::test_fixed" in log
    assert any("from_item_and_call" in r and r.startswith("voided") for r in records), records


EXACT_RESTORE = """def f():
    import pytest
    cls = pytest.TestReport
    was = vars(cls)["from_item_and_call"]

    def forged(cls, item, call):
        rep = was.__func__(cls, item, call)
        rep.outcome = "passed"
        setattr(cls, "from_item_and_call", was)
        return rep

    setattr(cls, "from_item_and_call", classmethod(forged))
    return 1
"""


def test_a_method_put_back_as_the_very_same_object_is_seen_before_it_is_used(graded):
    """The forged report method puts the original object itself back once used: nothing differs at the
    session's end. Python audits no write to a class's methods, so only the check before the report,
    comparing the classes' namespaces, sees it (it did not until session 20 wherever no raw-memory module
    was loaded: every task image)."""
    records, log = graded({"pkg/__init__.py": EXACT_RESTORE})
    assert "PASSED test_pkg.py::test_fixed" in log  # the exploit works on the runner
    assert any("from_item_and_call" in r and r.startswith("voided") for r in records), records


RUNTEST = """def f():
    import pytest
    target = pytest.Function
    target.runtest = lambda self: None
    return 1
"""


def test_runtest_replaced_during_a_test_is_seen(graded):
    records, _ = graded({"pkg/__init__.py": RUNTEST})
    assert any("Function.runtest" in r and r.startswith("voided") for r in records), records


IMPORT_TIME_RUNTEST = "import pytest\n\nsetattr(pytest.Function, 'runtest', lambda self: None)\n\n" + (
    "def f():\n    return 1\n"
)


def test_runtest_replaced_at_import_is_a_difference_from_the_clean_tree(graded):
    records, log = graded({"pkg/__init__.py": IMPORT_TIME_RUNTEST})
    assert "PASSED test_pkg.py::test_fixed" in log
    assert any("machinery" in r and "Function.runtest" in r for r in records), records


ASSERT_EQUAL = """def f():
    import unittest
    tc = unittest.TestCase
    tc.assertEqual = lambda self, a, b, msg=None: None
    return 1
"""


def test_unittest_assertion_replaced_through_a_name_is_seen(graded):
    records, log = graded({"pkg/__init__.py": ASSERT_EQUAL})
    assert "PASSED test_unit.py::T::test_fixed" in log
    assert any("TestCase.assertEqual" in r and r.startswith("voided") for r in records), records


LATE_PLUGIN = """def f():
    import gc, pytest
    pm = next(o for o in gc.get_objects() if type(o).__name__ == "PytestPluginManager")

    class Forge:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"

    if not pm.has_plugin("forge"):
        pm.register(Forge(), "forge")
    return 1
"""


def test_a_plugin_registered_on_the_first_tests_run_is_seen(graded):
    records, log = graded({"pkg/__init__.py": LATE_PLUGIN})
    found = "\n".join(records)
    assert "voided runner_probe" in found and "pytest_runtest_makereport: forge" in found, found


TXT_MODULE = """import os, sys, importlib

_here = os.path.dirname(__file__)
with open(os.path.join(_here, "data.txt")) as fh:
    _text = fh.read()
with open(os.path.join(_here, "_accel.py"), "w") as fh:
    fh.write(_text)
importlib.invalidate_caches()
from . import _accel  # noqa
os.remove(os.path.join(_here, "_accel.py"))


def f():
    return 1
"""
TXT_PAYLOAD = "import _pytest.reports as r\nr.TestReport.outcome = 'passed'\n"


def test_a_module_written_from_a_text_file_and_deleted_is_void(graded):
    patch = {"pkg/__init__.py": TXT_MODULE, "pkg/data.txt": TXT_PAYLOAD}
    records, _ = graded(patch)
    found = "\n".join(records)
    assert "voided run_imported_module" in found and "pkg._accel" in found and "deleted" in found, found


PYCACHE_MODULE = """import os, importlib.util

_path = os.path.join(os.path.dirname(__file__), "__pycache__", "_speed.py")
_spec = importlib.util.spec_from_file_location("pkg._speed", _path)
_mod = importlib.util.module_from_spec(_spec)
import sys
sys.modules["pkg._speed"] = _mod
_spec.loader.exec_module(_mod)


def f():
    return 1
"""


def test_a_module_under_pycache_is_void(graded):
    patch = {"pkg/__init__.py": PYCACHE_MODULE, "pkg/__pycache__/_speed.py": "VALUE = 1\n"}
    records, _ = graded(patch)
    assert any("pkg._speed" in r and "__pycache__" in r and r.startswith("voided") for r in records), records


# ----------------------------------------------------------------------------- the verdict's rules (fast)


@pytest.mark.parametrize(
    ("entry", "action"),
    [
        ({"module": "m", "path": "/r/pkg/__pycache__/m.py", "state": "pycache"}, "voided"),
        ({"module": "m", "path": "/r/pkg/m.py", "state": "gone"}, "voided"),
        ({"module": "m", "path": "/r/pkg/m.txt", "state": "not_source"}, "voided"),
        ({"module": "m", "path": "/r/pkg/m.so", "state": "written"}, "voided"),
        ({"module": "m", "path": "/tmp/x/m.so", "state": "written"}, "noted"),
        ({"module": "m", "path": "/tmp/x/m.py", "state": "gone"}, "noted"),
    ],
)
def test_imported_module_rules(entry, action):
    records, scan = imported_records("/r", {"imports": [entry]})
    assert [r.action for r in records] == [action] and scan == {}


def test_a_written_source_with_its_text_is_scanned_not_voided():
    entry = {"module": "m", "path": "/tmp/x/m.py", "state": "gone", "text": "X = 1\n"}
    records, scan = imported_records("/r", {"imports": [entry]})
    assert records == [] and scan == {"/tmp/x/m.py": b"X = 1\n"}


def test_run_changes_are_noted_on_a_runner_repository_and_a_missing_end_voids():
    run = {"changes": ["replaced _pytest.runner.call_and_report (at the session's end)"]}
    (voided,) = guard_records(True, run, True, "o/r", ["pytest-dev/*"])
    (noted,) = guard_records(True, run, True, "pytest-dev/pytest", ["pytest-dev/*"])
    assert voided.action == "voided" and noted.action == "noted"
    (end,) = guard_records(True, {}, False, "o/r", [])
    assert end.action == "voided" and "session's end" in end.reason
    assert guard_records(False, {}, False, "o/r", []) == []


# ---- issue 48 item 8: payloads of round five's classes 1 and 2 written for this suite -------------------
CALLINFO_THROUGH_HELPER = """def f():
    _forge()
    return 1


def _runner():
    import pytest
    return getattr(pytest, "CallInfo", None) or __import__("_pytest.runner").runner.CallInfo


def _forge():
    cls = _runner()
    orig = cls.from_call.__func__

    def from_call(cls, func, when, *args, **kwargs):
        info = orig(cls, func, when, *args, **kwargs)
        if when == "call" and info.excinfo is not None:
            info = orig(cls, lambda: None, when, *args, **kwargs)
        return info

    cls.from_call = classmethod(from_call)
"""


def test_callinfo_reached_through_a_helper_is_seen(graded):
    """`pytest.CallInfo.from_call` (how a test's call becomes its outcome) swallowing failures, replaced
    during the first test through what a helper returned."""
    records, _ = graded({"pkg/__init__.py": CALLINFO_THROUGH_HELPER})
    assert any("CallInfo.from_call" in r and r.startswith("voided") for r in records), records


LAZY_WRITTEN_MODULE = """def f():
    import importlib, os, sys
    here = os.path.dirname(__file__)
    path = os.path.join(here, "_lazy.py")
    with open(path, "w") as out, open(os.path.join(here, "table.txt")) as data:
        out.write(data.read())
    sys.modules.pop("pkg._lazy", None)
    value = importlib.import_module("pkg._lazy").VALUE
    os.remove(path)
    return value
"""


def test_a_module_written_and_deleted_during_a_test_is_seen(graded):
    """Not at import (round four's payload): during the first test, past collection, from a .txt."""
    records, log = graded({"pkg/__init__.py": LAZY_WRITTEN_MODULE, "pkg/table.txt": "VALUE = 2\n"})
    assert "PASSED test_pkg.py::test_fixed" in log  # the module really ran
    assert any(
        "pkg._lazy" in r and "deleted during the run" in r and r.startswith("voided") for r in records
    ), records


# ---- issue 48 item 5: the per-test check compares the classes' namespaces only when a write could dodge
# the audit hook; these routes are still seen at the first check after them, not only at the session's end
DELETED_ATTRIBUTE = """def f():
    import pytest
    del pytest.Function.repr_failure
    return 1
"""


def test_a_class_attribute_deleted_during_a_test_is_seen_at_that_tests_report(graded):
    """A deletion is not an audited event: the per-test check compares the classes' namespace sizes."""
    records, _ = graded({"pkg/__init__.py": DELETED_ATTRIBUTE})
    assert any(
        "Function.repr_failure" in r and "before the call report of test_pkg.py::test_fixed" in r
        for r in records
    ), records


NAMESPACE_THROUGH_GC = """def f():
    import gc, pytest
    space = gc.get_referents(vars(pytest.TestReport))[0]
    orig = space["from_item_and_call"]
    space["from_item_and_call"] = classmethod(lambda cls, item, call: orig.__func__(cls, item, call))
    return 1
"""


def test_a_class_namespace_written_through_gc_is_seen_at_that_tests_report(graded):
    """A write into a class's own dict (reached through gc, no audited set) makes every later check
    compare the classes' namespaces: seen before the test's own report, not only at the session's end."""
    records, _ = graded({"pkg/__init__.py": NAMESPACE_THROUGH_GC})
    assert any(
        "TestReport.from_item_and_call" in r and "before the call report of test_pkg.py::test_fixed" in r
        for r in records
    ), records


EXECUTOR_CELL = """def f():
    import contextlib, unittest.case
    cells = unittest.case._Outcome.testPartExecutor.__closure__
    def swallow(self, test_case, subTest=False):
        try:
            yield
        except Exception:
            pass
    cells[0].cell_contents = swallow
    return 1
"""

DEFAULTS_IN_PLACE = """def f():
    import _pytest.runner
    _pytest.runner.CallInfo.__init__.__kwdefaults__["_ispytest"] = True
    return 1
"""


def test_a_watched_functions_closure_cell_swapped_is_seen(graded):
    """`_Outcome.testPartExecutor` is a context manager whose closure holds the generator it runs: a new
    generator put in that cell swallows every failing assertion of a unittest test, though the function,
    its code and its defaults are the same objects. The cell's contents are compared too."""
    records, log = graded({"pkg/__init__.py": EXECUTOR_CELL})
    assert "PASSED test_unit.py::T::test_fixed" in log  # the exploit works: its failing assertion swallowed
    assert any("testPartExecutor" in r and r.startswith("voided") for r in records), records


def test_keyword_defaults_edited_in_place_are_seen(graded):
    """The `__kwdefaults__` dict is the same object after an in-place edit: its values are compared."""
    records, _ = graded({"pkg/__init__.py": DEFAULTS_IN_PLACE})
    assert any("CallInfo.__init__" in r and r.startswith("voided") for r in records), records


EXECUTOR_CELL_PUT_BACK = """def f():
    import unittest.case
    cells = unittest.case._Outcome.testPartExecutor.__closure__
    original = cells[0].cell_contents
    def swallow(self, test_case, subTest=False):
        try:
            yield
        except Exception:
            cells[0].cell_contents = original  # put back once used: the session's end sees nothing
    cells[0].cell_contents = swallow
    return 1
"""


def test_a_closure_cell_put_back_once_used_is_seen_at_that_tests_report(graded):
    """Cell contents have no audited write: the check before each report compares them."""
    records, log = graded({"pkg/__init__.py": EXECUTOR_CELL_PUT_BACK})
    assert "PASSED test_unit.py::T::test_fixed" in log
    assert any(r.startswith("voided") and "testPartExecutor" in r and "before the" in r for r in records), (
        records
    )


LATE_CHANGE = """import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    import _pytest.python
    _pytest.python.Function.runtest = lambda self: None
"""


def test_a_change_after_collections_end_before_the_loop_is_a_difference_from_the_clean_tree(graded):
    """The loop's baseline is the collection's snapshot when nothing moved in between (no walk): a class
    written in between (here by a hook that runs after the grader's) is seen and walked, as before."""
    records, _ = graded({"conftest.py": LATE_CHANGE})
    assert any("machinery: added replaced _pytest.python.Function.runtest" in r for r in records), records
