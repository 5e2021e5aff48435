"""The source of the runner guard's half of the probe plugin (`runner_guard` says what it checks and why).

Written for every Python the images carry (3.5+): no f-strings, no annotations. Appended to the probe
plugin's source (`runner_probe.plan_probe`): it uses ``_seen``, ``_write``, ``_snapshot`` and ``_SELF``
of that source, and its hooks replace the probe's own collection-end and session-end hooks.
"""

from __future__ import annotations

from swe_rl.grading.runner.guard_imports import IMPORTS_SOURCE

__all__ = ["GUARD_SOURCE", "MACHINERY", "MAX_CHANGES", "MAX_IMPORTS", "MAX_SOURCE"]

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

_HEAD = '''

import importlib as _importlib

_MACHINERY = __MACHINERY__
_MAX_CHANGES, _MAX_IMPORTS, _MAX_SOURCE = __LIMITS__
for _m in _MACHINERY:
    try:
        _importlib.import_module(_m)
    except Exception:
        pass


_EMPTY = object()


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
        _entries(mod, mname + ".", out)
        for cname, cls in list(vars(mod).items()):
            if isinstance(cls, type) and getattr(cls, "__module__", "") == mname:
                _entries(cls, "%s.%s." % (mname, cname), out)
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
_VALUES, _FUNCTION = _mc("values"), _ag("function")


def _impls_of(callers):
    """Every hook implementation of `callers`, in order (pluggy 1: ``_hookimpls``; 0.x: two lists)."""
    if all(hasattr(c, "_hookimpls") for c in callers):
        return list(_chain.from_iterable(map(_ag("_hookimpls"), callers)))
    both = _ag("_nonwrappers", "_wrappers")
    return list(_chain.from_iterable(_chain.from_iterable(map(both, callers))))


def _watchlist(pm, types):
    """What the check before each report compares by identity, flat (so that it runs at C speed): every
    key and value of the watched modules' namespaces, of the plugin manager and its hook relay, and of
    the watched classes' namespaces and their sizes, every watched function's code and defaults (read only
    where no audit hook sees their writes), every hook caller's type and executor, every hook
    implementation and its function."""
    spaces, classes = [], []
    for mname in _MACHINERY:
        mod = sys.modules.get(mname)
        if mod is None:
            continue
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
    values = list(_chain.from_iterable(map(_VALUES, owners)))
    fns = [f for f in map(_inner, values + list(_chain.from_iterable(map(_VALUES, spaces)))) if f is not None]
    callers = list(vars(relay).values()) if relay is not None else []
    impls = _impls_of(callers)
    hx = [getattr(c, "_hookexec", None) for c in callers]
    kwdicts = [d for d in map(_KWDEFAULTS, fns) if d]
    cells = list(_chain.from_iterable(f.__closure__ or () for f in fns + list(map(_FUNCTION, impls))
                                      if type(f).__name__ == "function"))
    return (spaces, list(_chain.from_iterable(spaces)), list(_chain.from_iterable(map(_VALUES, spaces))),
            owners, list(_chain.from_iterable(owners)), values, list(map(len, owners)), classes,
            fns, list(map(_CODE, fns)), list(map(_DEFAULTS, fns)), list(map(_KWDEFAULTS, fns)),
            callers, list(map(type, callers)), hx, impls, list(map(_FUNCTION, impls)),
            cells, list(map(_cell, cells)), kwdicts, _kw_values(kwdicts))


def _kw_values(kwdicts):  # keys and values of the watched functions' keyword defaults (edited in place)
    return list(_chain.from_iterable(_chain(d, d.values()) for d in kwdicts))


def _same_all(now, was):
    return len(now) == len(was) and all(map(_is, now, was))


_AUDITED = hasattr(sys, "addaudithook")


def _quick_same(w):
    (spaces, skeys, svalues, owners, okeys, ovalues, sizes, classes, fns, codes, defaults, kwdefaults,
     callers, kinds, hx, impls, ifns, cells, cell_values, kwdicts, kw_values) = w
    # closure cells and keyword defaults change in place, with no audited event: compared every time
    if not (_same_all(list(map(_cell, cells)), cell_values) and _same_all(_kw_values(kwdicts), kw_values)):
        return False
    if not _same_all(list(_chain.from_iterable(map(_VALUES, spaces))), svalues):
        return False
    if not _same_all(list(_chain.from_iterable(spaces)), skeys):
        return False
    if list(map(len, owners)) != sizes:
        return False
    # the classes' namespaces every time: Python audits a write to a class's special attributes only
    # (``__module__``, ``__doc__``, ``__qualname__``, ``__bases__``), never to its methods
    if not (_same_all(list(_chain.from_iterable(map(_VALUES, owners))), ovalues)
            and _same_all(list(_chain.from_iterable(owners)), okeys)):
        return False
    if _AUDITED and not _dirty:  # reading __code__ is itself audited (slow): the audit hook sees its writes
        pass
    elif not (_same_all(list(map(_CODE, fns)), codes) and _same_all(list(map(_DEFAULTS, fns)), defaults)
            and _same_all(list(map(_KWDEFAULTS, fns)), kwdefaults)):
        return False
    if not _same_all(list(map(type, callers)), kinds):
        return False
    if not _same_all([getattr(c, "_hookexec", None) for c in callers], hx):
        return False
    now = _impls_of(callers)
    return _same_all(now, impls) and _same_all(list(map(_FUNCTION, now)), ifns)


_watched = []


def _check(where, item=None, full=False):
    try:
        _checked(where, item, full)
    except Exception as exc:  # never the run's failure: said, and the reward void
        if _record(["the runner guard could not check %s: %s: %s" % (where, type(exc).__name__, exc)]):
            _seen["run"] = _run
            _write(_state["config"], _state["session"], "run")


def _checked(where, item, full):
    config = _state["config"]
    pm = config.pluginmanager if config is not None else None
    found = False
    if _pending:
        found = _record(["%s (by %s)" % (c, where.replace("before", "the check before", 1))
                         for c in _pending[:]])
        del _pending[:]
    if full or not _watched or not _quick_same(_watched[0]):  # the deep walk: at the end, or on a move
        found = _record(["%s (%s)" % (c, where) for c in _changes(_after, _machinery(pm, _items_types))])
        _watched[:] = [_watchlist(pm, _items_types)]
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
    _state["config"], _state["session"] = session.config, session
    pm = session.config.pluginmanager
    items = list(getattr(session, "items", None) or [])
    _items_types[:] = list({type(i): None for i in items})
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
    classes = [c for c in _chain.from_iterable(map(_VALUES, watched[0])) if isinstance(c, type)]
    hooked = [f for f in watched[16] if type(f).__name__ == "function"]  # every plugin's hook functions
    _ids[0] = frozenset(map(id, classes + watched[7] + list(_items_types) + watched[8] + hooked))


def _wrapper(**kwargs):
    try:
        from pluggy import HookimplMarker
        return HookimplMarker("pytest")(**kwargs)
    except Exception:
        import pytest
        return pytest.hookimpl(**kwargs)


@_wrapper(hookwrapper=True, trylast=True)
def pytest_runtestloop(session):
    if _state["config"] is not None:
        try:
            _baseline()
        except Exception as exc:
            _record(["the runner guard could not take its baseline: %s: %s" % (type(exc).__name__, exc)])
    yield


@_wrapper(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    if _after and getattr(call, "when", "") == "call":  # once per test: a change made in its setup,
        _check("before the call report of %s" % item.nodeid, item)  # call or the last teardown is seen
    yield


def pytest_sessionfinish(session):
    _state["finished"] = True
    if _after:
        _check("at the session's end", full=True)
    _seen["run"] = _run
    _write(session.config, session, "finished", _state.get("loop"))
'''

GUARD_SOURCE = (
    (_HEAD + "\n\n" + IMPORTS_SOURCE + _TAIL)
    .replace("__MACHINERY__", repr(tuple(MACHINERY)))
    .replace("__LIMITS__", repr((MAX_CHANGES, MAX_IMPORTS, MAX_SOURCE)))
)
