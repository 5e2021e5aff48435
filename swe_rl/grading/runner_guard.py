"""The runner checks itself, and every module the run imports was read (part of the runner probe's plugin).

The probe plugin of `runner_probe` reports the runner's *configuration*; a patch that changes the
runner's *code* at run time (``import pytest; r = pytest.TestReport`` in a helper, then
``setattr(r, "from_item_and_call", ...)``; ``pytest.Function.runtest``; ``unittest.TestCase.assertEqual``;
a plugin registered on the first test's run) or imports code no scan read (a module written from a
``.txt`` at import time and deleted, a ``.py`` under ``__pycache__``) leaves the configuration as it was.
So the plugin also carries `GUARD_SOURCE`, which:

- **records the runner's machinery when the plugin is imported** (``-p`` on the command line: before
  conftests, entry-point plugins and any code of the package the tests import): every callable of the
  modules in `MACHINERY` and of the classes they define (`pytest`'s re-exports, report construction,
  ``CallInfo``, ``runtest``, the session's loop, the unittest plugin, skipping/xfail, the terminal
  reporter, pluggy's hook callers and ``_multicall``, ``unittest``'s ``TestCase`` and result classes),
  each as the object itself, its ``__code__``, ``__defaults__`` and ``__kwdefaults__``; the plugin
  manager's own callables; every hook caller's type, executor and implementations (plugin and function);
- **compares after collection** what changed since (``collected.machinery``): the task's own conftests
  register hooks there, so this list is compared with the clean tree's like the rest of the snapshot;
- **takes a second record at collection's end** (plus, per collected item, its class and its test
  function with that function's code) and checks it **before every report is made** (a hook wrapper of
  ``pytest_runtest_makereport``, which runs before pytest's own report construction, so a replacement
  is seen before it is used), before each call phase for the item (an instance ``runtest``, a swapped
  test function or ``__code__``) and at the session's end; any difference is a ``run`` change and voids
  (`guard_records`); a session whose end was never reported voids too (the hooks were bypassed);
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

__all__ = ["GUARD_SOURCE", "MACHINERY", "guard_records", "imported_records"]

MACHINERY = (
    "pytest _pytest.reports _pytest.runner _pytest.python _pytest.nodes _pytest.main _pytest.unittest "
    "_pytest.skipping _pytest.outcomes _pytest.terminal _pytest.fixtures _pytest.python_api _pytest.recwarn "
    "_pytest.capture _pytest.config _pytest.warnings pluggy pluggy.hooks pluggy.callers pluggy.manager "
    "pluggy._hooks pluggy._callers pluggy._manager pluggy._result unittest unittest.case unittest.result "
    "unittest.suite unittest.runner"
).split()
"""Modules whose callables (and those of the classes they define) are the runner's machinery."""

MAX_CHANGES = 40
MAX_IMPORTS = 100
MAX_SOURCE = 256 << 10

# Written for every Python the images carry (3.5+): no f-strings, no annotations. Appended to the probe
# plugin's source: it uses ``_seen``, ``_write``, ``_snapshot`` and ``_SELF`` of that source.
GUARD_SOURCE = '''

import importlib as _importlib

_MACHINERY = __MACHINERY__
_MAX_CHANGES, _MAX_IMPORTS, _MAX_SOURCE = __LIMITS__
for _m in _MACHINERY:
    try:
        _importlib.import_module(_m)
    except Exception:
        pass


def _facts(value):
    """The objects that make one callable what it is (compared by identity)."""
    if isinstance(value, (staticmethod, classmethod)):
        inner = value.__func__
        return (value, inner, getattr(inner, "__code__", None), getattr(inner, "__defaults__", None))
    if isinstance(value, property):
        return (value, value.fget, value.fset, value.fdel)
    if isinstance(value, type):
        return (value,)
    if hasattr(value, "__self__") and hasattr(value, "__func__"):  # a bound method: made anew per access
        return (value.__self__, value.__func__, getattr(value.__func__, "__code__", None))
    if not callable(value):
        return None
    code = getattr(value, "__code__", None) if type(value).__name__ == "function" else None
    if code is None:
        return (value,)
    return (value, code, value.__defaults__, value.__kwdefaults__)


def _entries(owner, prefix, out):
    try:
        items = list(vars(owner).items())
    except TypeError:
        return
    for name, value in items:
        facts = _facts(value)
        if facts is not None:
            out[prefix + name] = facts


def _pname(plugin, name):
    if name is None or str(name).isdigit():
        return "<%s.%s>" % (type(plugin).__module__, type(plugin).__qualname__)
    return str(name)


def _machinery(pm=None, items=()):
    out = {}
    for mname in _MACHINERY:
        mod = sys.modules.get(mname)
        if mod is None:
            continue
        _entries(mod, mname + ".", out)
        for cname, cls in list(vars(mod).items()):
            if isinstance(cls, type) and getattr(cls, "__module__", "") == mname:
                _entries(cls, "%s.%s." % (mname, cname), out)
    for kind in {type(i) for i in items}:
        for cls in kind.__mro__:
            if cls is not object:
                _entries(cls, "%s.%s." % (cls.__module__, cls.__qualname__), out)
    if pm is not None:
        out["<plugin manager>"] = (type(pm),)
        _entries(pm, "<plugin manager>.", out)
        for name in ("_inner_hookexec", "_hookexec", "register", "unregister", "subset_hook_caller"):
            facts = _facts(getattr(pm, name, None))
            if facts is not None:
                out["<plugin manager>." + name] = facts
        relay = getattr(pm, "hook", None)
        for hname, caller in sorted(vars(relay).items()) if relay is not None else ():
            try:
                impls = caller.get_hookimpls()
            except Exception:
                impls = list(getattr(caller, "_nonwrappers", [])) + list(getattr(caller, "_wrappers", []))
            out["hook %s" % hname] = (caller, type(caller)) + (_facts(getattr(caller, "_hookexec", None)) or ())
            for impl in impls:
                plugin = getattr(impl, "plugin", None)
                if plugin is sys.modules.get(_SELF):
                    continue
                fn = getattr(impl, "function", None)
                key = "hook %s: %s.%s" % (hname, _pname(plugin, getattr(impl, "plugin_name", None)),
                                           getattr(fn, "__qualname__", "?"))
                out[key] = (impl, fn, getattr(fn, "__code__", None), plugin)
    return out


def _same(a, b):
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _changes(before, after):
    out = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            out.append("removed " + key)
        elif key not in before:
            out.append("added " + key)
        elif not _same(before[key], after[key]):
            out.append("replaced " + key)
    return out


def _target(item):
    try:
        fn = item.function
    except Exception:
        return (type(item), vars(item).get("runtest"))
    return (type(item), vars(item).get("runtest"), fn, getattr(fn, "__code__", None))


_start = {}


def pytest_plugin_registered(plugin, manager):
    if not _start:  # the first call (this plugin's own registration): before conftests and entry points
        _start.update(_machinery(manager))


_after = {}
_items = {}
_run = {"changes": [], "imports": []}
_state = {"config": None, "session": None, "finished": False}


def _mark():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".mark-%d" % os.getpid())
    with open(path, "w"):
        pass
    st = os.stat(path)
    return min(st.st_ctime_ns, st.st_mtime_ns)


_MARK = _mark()
_known = set(sys.modules)
_captured = {}
_busy = []


def _new(real):
    st = os.stat(real)
    return max(st.st_ctime_ns, st.st_mtime_ns) >= _MARK


def _audit(event, args):
    if event != "open" or _busy or not args or not isinstance(args[0], str):
        return
    if not args[0].endswith((".py", ".pyw")) or (args[1] and "r" not in str(args[1])):
        return
    _busy.append(1)
    try:
        real = os.path.realpath(args[0])
        if real not in _captured and ("/__pycache__/" in real or _new(real)):
            with open(real, "rb") as fh:
                _captured[real] = fh.read(_MAX_SOURCE)
    except Exception:
        pass
    finally:
        _busy.pop()


if hasattr(sys, "addaudithook"):
    sys.addaudithook(_audit)

_SOURCE = (".py", ".pyw", ".pyc", ".so", ".pyd")


def _imports():
    found = False
    for name in [n for n in list(sys.modules) if n not in _known]:
        _known.add(name)
        space = getattr(sys.modules.get(name), "__dict__", None)
        path = space.get("__file__") if isinstance(space, dict) else None
        if not isinstance(path, str) or len(_run["imports"]) >= _MAX_IMPORTS:
            continue
        real = os.path.realpath(path)
        try:
            state = "pycache" if "/__pycache__/" in real else "written" if _new(real) else ""
        except OSError:
            state = "gone"
        if not state and not real.endswith(_SOURCE):
            state = "not_source"
        if not state:
            continue
        text = _captured.get(real)
        if text is None and state != "gone":
            try:
                with open(real, "rb") as fh:
                    text = fh.read(_MAX_SOURCE)
            except OSError:
                text = None
        _run["imports"].append({"module": name, "path": real, "state": state,
                                "text": None if text is None else text.decode("utf-8", "surrogateescape")
                                .encode("utf-8", "surrogatepass").decode("utf-8", "replace")})
        found = True
    return found


def _record(changes):
    fresh = [c for c in changes if c not in _run["changes"]]
    _run["changes"].extend(fresh[:max(0, _MAX_CHANGES - len(_run["changes"]))])
    return bool(fresh)


def _check(where, item=None):
    config = _state["config"]
    pm = config.pluginmanager if config is not None else None
    found = _record(["%s (%s)" % (c, where) for c in _changes(_after, _machinery(pm, _items_types))])
    if item is not None:
        was = _items.get(id(item))
        if was is not None and not _same(was, _target(item)):
            found = _record(["the test item %s: its class, runtest or test function changed (%s)"
                             % (item.nodeid, where)]) or found
    found = _imports() or found
    if found and config is not None:
        _seen["run"] = _run
        _write(config, _state["session"], "run")


_items_types = []


def pytest_collection_finish(session):
    global _after
    _state["config"], _state["session"] = session.config, session
    pm = session.config.pluginmanager
    items = list(getattr(session, "items", None) or [])
    _items_types[:] = list({type(i): i for i in items}.values())
    for item in items:
        _items[id(item)] = _target(item)
    _after = _machinery(pm, _items_types)
    _imports()
    _seen["run"] = _run
    _write(session.config, session, "collected", _changes(_start, _machinery(pm)))


def _wrapper(**kwargs):
    try:
        from pluggy import HookimplMarker
        return HookimplMarker("pytest")(**kwargs)
    except Exception:
        import pytest
        return pytest.hookimpl(**kwargs)


@_wrapper(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    if _after:
        _check("before the %s report of %s" % (getattr(call, "when", "?"), item.nodeid),
               item if getattr(call, "when", "") == "call" else None)
    yield


def pytest_sessionfinish(session):
    _state["finished"] = True
    if _after:
        _check("at the session's end")
    _seen["run"] = _run
    _write(session.config, session, "finished")
'''.replace("__MACHINERY__", repr(tuple(MACHINERY))).replace(
    "__LIMITS__", repr((MAX_CHANGES, MAX_IMPORTS, MAX_SOURCE))
)


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
