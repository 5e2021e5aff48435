"""The source of the runner guard's half of the probe plugin (`runner_guard` says what it checks and why).

Written for every Python the images carry (3.5+): no f-strings, no annotations. Appended to the probe
plugin's source (`runner_probe.plan_probe`): it uses ``_seen``, ``_write``, ``_snapshot`` and ``_SELF``
of that source, and its hooks replace the probe's own collection-end and session-end hooks.
"""

from __future__ import annotations

from swe_rl.grading.runner.guard_assertion import ASSERTION_SOURCE
from swe_rl.grading.runner.guard_imports import IMPORTS_SOURCE

__all__ = ["ASSERTION_BUILTINS", "GUARD_SOURCE", "MACHINERY", "MAX_CHANGES", "MAX_IMPORTS", "MAX_SOURCE"]

MACHINERY = (
    "pytest _pytest.reports _pytest.runner _pytest.python _pytest.nodes _pytest.main _pytest.unittest "
    "_pytest.skipping _pytest.outcomes _pytest.terminal _pytest.fixtures _pytest.python_api _pytest.recwarn "
    "_pytest.capture _pytest.config _pytest.warnings pluggy pluggy.hooks pluggy.callers pluggy.manager "
    "pluggy._hooks pluggy._callers pluggy._manager pluggy._result unittest unittest.case unittest.result "
    "unittest.suite unittest.runner _pytest.assertion _pytest.assertion.rewrite _pytest.assertion.util "
    "_pytest.mark _pytest.mark.structures _pytest.logging _pytest.monkeypatch _pytest.tmpdir _pytest.raises "
    "_pytest._code.code"
).split()
"""Modules whose callables (and those of the classes they define) are the runner's machinery."""
VOLATILE = ("_reprcompare", "_assertion_pass", "_config")
"""Globals of ``_pytest.assertion.util`` pytest itself sets around each test (the hooks its rewritten
asserts call to explain a failure): compared with what they were as the test's protocol began
(`pytest_runtest_logstart`), not with the session's snapshots."""

ASSERTION_BUILTINS = (
    "isinstance issubclass callable hasattr getattr len bool all any type object repr str int float complex "
    "list dict set frozenset tuple bytes sorted reversed min max sum abs round iter next zip map filter "
    "enumerate range hash id vars super property classmethod staticmethod"
).split()
"""Built-in names a test's assertions rest on, watched like the machinery, with every built-in exception
class: a rewritten assert raises ``AssertionError`` by name (``builtins.AssertionError`` bound to pytest's
xfail exception turns every failed assert into an expected failure), ``pytest.raises(ValueError)`` finds
its class by name, ``assert isinstance(...)`` its function. Left out: what tests mock as they run
(``open``, ``print``, ``input``, ``__import__``, ``exit``), and ``_`` (gettext installs one)."""

MAX_CHANGES = 40
MAX_IMPORTS = 100
MAX_SOURCE = 256 << 10

_HEAD = '''

import importlib as _importlib

_MACHINERY = __MACHINERY__
_UTIL, _VOLATILE = "_pytest.assertion.util", __VOLATILE__
_MAX_CHANGES, _MAX_IMPORTS, _MAX_SOURCE = __LIMITS__
for _m in _MACHINERY:
    try:
        _importlib.import_module(_m)
    except Exception:
        pass


_EMPTY = object()

import builtins as _builtins_module

_B = vars(_builtins_module)
_WATCHED_BUILTINS = tuple(sorted(
    name for name, value in _B.items()
    if name in __ASSERTION_BUILTINS__ or (isinstance(value, type) and issubclass(value, BaseException))))


def _hookimpl(**kwargs):
    """A hook implementation's marker (pluggy's own; pytest's where pluggy has none by that name)."""
    try:
        from pluggy import HookimplMarker
        return HookimplMarker("pytest")(**kwargs)
    except Exception:
        import pytest
        return pytest.hookimpl(**kwargs)


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _EMPTY


def _inside(fn):
    """What a function holds besides its code and defaults tuple, whose contents can change while the
    function, its code and its dicts stay the same objects: its closure cells' contents (a decorator's
    wrapped function, a context manager's generator) and its keyword defaults' values (edited in place)."""
    if type(fn).__name__ != "function":
        return ()
    kw = fn.__kwdefaults__
    return tuple(map(_cell, fn.__closure__ or ())) + (tuple(kw) + tuple(kw.values()) if kw else ())


def _attrs(value):
    """A callable's own attribute dict (None for a class, a non-callable, no dict or a mapping that is not
    a dict)."""
    if isinstance(value, type) or not callable(value):
        return None
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except Exception:
        return None
    return attrs if type(attrs) is dict else None


def _facts(value):
    """The objects that make one callable what it is (compared by identity)."""
    if isinstance(value, (staticmethod, classmethod)):
        inner = value.__func__
        return (value, inner, getattr(inner, "__code__", None), getattr(inner, "__defaults__", None),
                *_inside(inner))
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
    return (value, code, value.__defaults__, value.__kwdefaults__, *_inside(value))


def _entries(owner, prefix, out, attrs=False):
    """`attrs`: a watched module's own callables, whose attributes (``pytest.xfail.Exception``; on pytest 8+
    ``xfail`` is an object) are written with no audited event; a test's functions and objects (a test
    class's mock, Hypothesis' seed on its test) change theirs as they run, and are not compared so."""
    try:
        items = list(vars(owner).items())
    except TypeError:
        return
    for name, value in items:
        facts = _facts(value)
        if facts is not None:
            own = _attrs(value) if attrs else None
            out[prefix + name] = facts + (tuple(own) + tuple(own.values()) if own else ())


def _pname(plugin, name):
    if name is None or str(name).isdigit():
        return "<%s.%s>" % (type(plugin).__module__, type(plugin).__qualname__)
    return str(name)


def _typed(out, types):
    """The test items' classes (and their bases) into a walk's entries."""
    for kind in types:
        for cls in kind.__mro__:
            if cls is not object:
                _entries(cls, "%s.%s." % (cls.__module__, cls.__qualname__), out)


def _machinery(pm=None, types=()):
    out = {}
    for mname in _MACHINERY:
        mod = sys.modules.get(mname)
        if mod is None:
            continue
        _entries(mod, mname + ".", out, attrs=True)
        if mname == _UTIL:  # pytest's own per-test hooks: checked against the test's start instead
            for name in _VOLATILE:
                out.pop(mname + "." + name, None)
        for cname, cls in list(vars(mod).items()):
            if isinstance(cls, type) and getattr(cls, "__module__", "") == mname:
                _entries(cls, "%s.%s." % (mname, cname), out)
    for name in _WATCHED_BUILTINS:
        out["builtins." + name] = (_B.get(name, _EMPTY),)
    _typed(out, types)
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
'''

_TAIL = '''

_said = set()


def _record(changes):
    """Keep the first sighting of each change (with where it was seen)."""
    fresh = [c for c in changes if c.split(" (", 1)[0] not in _said]
    _said.update(c.split(" (", 1)[0] for c in fresh)
    _run["changes"].extend(fresh[:max(0, _MAX_CHANGES - len(_run["changes"]))])
    return bool(fresh)


def _inner(value):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    return value if type(value).__name__ == "function" else None


from itertools import chain as _chain
from operator import attrgetter as _ag, is_ as _is, methodcaller as _mc

_CODE, _DEFAULTS, _KWDEFAULTS = _ag("__code__"), _ag("__defaults__"), _ag("__kwdefaults__")
_VALUES, _FUNCTION, _CONTENTS = _mc("values"), _ag("function"), _ag("cell_contents")
_FUNC, _FGET, _FSET, _FDEL = _ag("__func__"), _ag("fget"), _ag("fset"), _ag("fdel")


def _impls_of(callers):
    """Every hook implementation of `callers`, in order (pluggy 1: ``_hookimpls``; 0.x: two lists)."""
    if all(hasattr(c, "_hookimpls") for c in callers):
        return list(_chain.from_iterable(map(_ag("_hookimpls"), callers)))
    both = _ag("_nonwrappers", "_wrappers")
    return list(_chain.from_iterable(_chain.from_iterable(map(both, callers))))


def _watchlist(pm, types):
    """What the check before a report compares (`_quick_same`), in lists built at C speed: the watched
    namespaces (modules, classes, the plugin manager and its hook relay, module-level callables' own
    attributes), closure cells, keyword defaults, what wrappers wrap, hook callers and implementations;
    read only where no audit hook sees their writes, every watched function's code and defaults."""
    spaces, classes, util = [], [], None
    for mname in _MACHINERY:
        mod = sys.modules.get(mname)
        if mod is None:
            continue
        if mname == _UTIL:
            util = vars(mod)
        else:
            spaces.append(vars(mod))
        for cls in list(vars(mod).values()):
            if isinstance(cls, type) and getattr(cls, "__module__", "") == mname:
                classes.append(cls)
    for kind in types:
        classes.extend(cls for cls in kind.__mro__ if cls is not object)
    relay = getattr(pm, "hook", None)
    for extra in (pm, relay):
        try:
            spaces.append(vars(extra))
        except TypeError:
            pass
    owners = [vars(cls) for cls in classes]
    values = list(_chain.from_iterable(map(_VALUES, owners + spaces)))
    fns = [f for f in map(_inner, values) if f is not None]
    callers = list(vars(relay).values()) if relay is not None else []
    impls = _impls_of(callers)
    cells = list(_chain.from_iterable(f.__closure__ or () for f in fns + list(map(_FUNCTION, impls))
                                      if type(f).__name__ == "function"))
    # the module-level callables' own attributes (``pytest.xfail.Exception``); a method's, which nothing of
    # the runner reads while tests run, are in the deep walks (at collection's end and the session's)
    attrs = [d for d in map(_attrs, _chain.from_iterable(map(_VALUES, spaces)))
             if d is not None]
    w = {"spaces": spaces + [d for d in attrs if d], "owners": owners, "modules": spaces, "classes": classes,
         "fns": fns, "callers": callers, "impls": impls, "bare": [d for d in attrs if not d],
         "full": [c for c in cells if _cell(c) is not _EMPTY],
         "empty": [c for c in cells if _cell(c) is _EMPTY],
         "kwdicts": [d for d in map(_KWDEFAULTS, fns) if d],
         "wrappers": [v for v in values if isinstance(v, (staticmethod, classmethod))],
         "props": [v for v in values if isinstance(v, property)],
         "util": util, "util_was": {k: v for k, v in (util or {}).items() if k not in _VOLATILE}}
    w["sizes"], w["keys"], w["names"], w["values"] = _sizes(w), _keys(w), _names(w), _values(w)
    w["code"] = _code(fns)
    return w


def _sizes(w):  # every count by equality
    return list(map(len, w["spaces"] + w["owners"] + w["kwdicts"])) + [len(w["callers"])]


def _keys(w):  # by identity: a module's or a function's dict takes keys of any type (a str subclass)
    return list(_chain(_chain.from_iterable(w["spaces"]), _chain.from_iterable(w["kwdicts"])))


def _names(w):  # by equality: a class's namespace holds exact strings (set through type.__setattr__)
    return list(_chain.from_iterable(w["owners"]))


def _values(w):
    callers, props = w["callers"], w["props"]
    impls = _impls_of(callers)
    return list(_chain(_chain.from_iterable(map(_VALUES, w["spaces"] + w["owners"])),
                       map(_CONTENTS, w["full"]), _chain.from_iterable(map(_VALUES, w["kwdicts"])),
                       map(_FUNC, w["wrappers"]),
                       map(_FGET, props), map(_FSET, props), map(_FDEL, props), map(type, callers),
                       [getattr(c, "_hookexec", None) for c in callers], [len(impls)], impls,
                       map(_FUNCTION, impls), map(_B.get, _WATCHED_BUILTINS)))


def _code(fns):
    return list(_chain(map(_CODE, fns), map(_DEFAULTS, fns), map(_KWDEFAULTS, fns)))


def _same_all(now, was):
    return len(now) == len(was) and all(map(_is, now, was))


_AUDITED = hasattr(sys, "addaudithook")


def _quick_same(w):
    """Nothing watched moved since `w` was taken: values and keys by identity (an object that says it
    equals another is not it), a class's names and every size by equality. A classmethod, staticmethod or
    property is compared by what it wraps too: ``__init__`` called again changes that in place."""
    try:
        if (_sizes(w) != w["sizes"] or not _same_all(_values(w), w["values"])
                or not _same_all(_keys(w), w["keys"]) or _names(w) != w["names"] or any(map(len, w["bare"]))):
            return False
    except Exception:  # a closure cell emptied, an executor gone: moved
        return False
    if w["empty"] and not all(_cell(c) is _EMPTY for c in w["empty"]) or not _util_same(w):
        return False
    # closure cells, keyword defaults and the classes' namespaces change with no audited event; a
    # function's code and defaults are set with one (``object.__setattr__``), seen at once unless the
    # run took a way around it (`_dirty`); reading ``__code__`` is itself audited (slow)
    return (_AUDITED and not _dirty) or _same_all(_code(w["fns"]), w["code"])


_watched = []


def _check(where, item=None, full=False, light=False):
    try:
        _checked(where, item, full, light)
    except Exception as exc:  # never the run's failure: said, and the reward void
        if _record(["the runner guard could not check %s: %s: %s" % (where, type(exc).__name__, exc)]):
            _seen["run"] = _run
            _write(_state["config"], _state["session"], "run")


def _compared(where, item, pm, full=False):
    found = False
    if item is not None:  # (at the session's end pytest has put them back: its protocol is over)
        found = _record(["replaced %s.%s (%s)" % (_UTIL, k, where) for k in _volatile_moved()])
    if full or not _watched or not _quick_same(_watched[0]):  # the deep walk: at the end, or on a move
        moved = _changes(_after, _machinery(pm, _items_types))
        found = _record(["%s (%s)" % (c, where) for c in moved]) or found
        if not full:
            _watched[:] = [_watchlist(pm, _items_types)]
    if item is not None:
        was = _items.get(id(item))
        if was is not None and not _same(was, _target(item)):
            found = _record(["the test item %s: its class, runtest or test function changed (%s)"
                             % (item.nodeid, where)]) or found
    return found


def _checked(where, item, full, light):
    config = _state["config"]
    pm = config.pluginmanager if config is not None else None
    found = False
    if _pending:
        found = _record(["%s (by %s)" % (c, where.replace("before", "the check before", 1))
                         for c in _pending[:]])
        del _pending[:]
    if not light:  # (light: a test whose outcome decides nothing: what was seen is recorded, not compared)
        found = _compared(where, item, pm, full) or found
    found = _imports() or found
    if found and config is not None:
        _seen["run"] = _run
        _write(config, _state["session"], "run")


_items_types = []


def pytest_collection_finish(session):
    _state["config"], _state["session"] = session.config, session
    pm = session.config.pluginmanager
    items = list(getattr(session, "items", None) or [])
    _items_types[:] = list({type(i): None for i in items})
    _state["every"] = _DECISIVE is None or not _DECISIVE <= {i.nodeid for i in items}
    for item in items:
        _items[id(item)] = _target(item)
    base = _machinery(pm)  # one walk: the collection's snapshot is it plus the items' classes
    collected = dict(base)
    _typed(collected, _items_types)
    _state["collected"] = collected
    _watch(pm)
    _imports()
    _seen["run"] = _run
    _write(session.config, session, "collected", _changes(_start, base))


def _baseline():
    """What every later check compares with: taken as the test loop starts (after every plugin's own
    collection-end hooks); what moved since collection's end is compared with the clean tree's. Nothing
    moved (the check made before each test, against collection's end): the collection's snapshot is it."""
    global _after
    pm = _state["config"].pluginmanager
    collected = _state.get("collected")
    if collected is not None and _watched and not _pending and _quick_same(_watched[0]):
        _after, _state["loop"] = collected, []
        return
    del _pending[:]  # a write seen between collection's end and the loop: in the walk's changes below
    _after = _machinery(pm, _items_types)
    _state["loop"] = _changes(collected or _after, _after)
    _watch(pm)


def _watch(pm):
    """The flat list the quick check compares, and the ids whose audited writes are seen at once."""
    _watched[:] = [_watchlist(pm, _items_types)]
    watched = _watched[0]
    classes = [c for c in _chain.from_iterable(map(_VALUES, watched["modules"])) if isinstance(c, type)]
    hooked = [f for f in map(_FUNCTION, watched["impls"]) if type(f).__name__ == "function"]  # hook functions
    _ids[0] = frozenset(map(id, classes + watched["classes"] + list(_items_types) + watched["fns"] + hooked))


@_hookimpl(hookwrapper=True, trylast=True)
def pytest_runtestloop(session):
    if _state["config"] is not None:
        try:
            _baseline()
        except Exception as exc:
            _record(["the runner guard could not take its baseline: %s: %s" % (type(exc).__name__, exc)])
    yield


@_hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    if _after and getattr(call, "when", "") == "call":  # once per test: a change made in its setup,
        # call or the last teardown is seen; compared before the reports that decide the verdict (a change
        # gone by the next of those changed no outcome that counts), recorded before every one
        light = not _state.get("every", True) and item.nodeid not in _DECISIVE
        _check("before the call report of %s" % item.nodeid, item, light=light)
    yield


def pytest_sessionfinish(session):
    _state["finished"] = True
    if _after:
        _check("at the session's end", full=True)
    _seen["run"] = _run
    _write(session.config, session, "finished", _state.get("loop"))
'''

GUARD_SOURCE = (
    (_HEAD + "\n\n" + IMPORTS_SOURCE + "\n\n" + ASSERTION_SOURCE + _TAIL)
    .replace("__MACHINERY__", repr(tuple(MACHINERY)))
    .replace("__LIMITS__", repr((MAX_CHANGES, MAX_IMPORTS, MAX_SOURCE)))
    .replace("__VOLATILE__", repr(VOLATILE))
    .replace("__ASSERTION_BUILTINS__", repr(frozenset(ASSERTION_BUILTINS)))
)
