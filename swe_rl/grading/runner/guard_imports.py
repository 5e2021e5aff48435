"""The source of the runner guard's watch on what the run imports, and its audit hook (`runner_guard`
says what it checks and why): part of the probe plugin's source, between the guard's machinery walk and
its checks (`guard_plugin.GUARD_SOURCE`); it uses the walk's ``_MAX_IMPORTS`` and ``_MAX_SOURCE``, and
the checks use its ``_pending``, ``_ids``, ``_dirty`` and ``_imports``.

Written for every Python the images carry (3.5+): no f-strings, no annotations.
"""

from __future__ import annotations

__all__ = ["IMPORTS_SOURCE"]

IMPORTS_SOURCE = '''
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


_pending = []
_ids = [frozenset()]
"""After collection: the ids of every watched class and function (their objects are held, ids stay)."""
_AUDIT_SETS = ("object.__setattr__", "object.__delattr__")


_dirty = []
"""Not empty once the run took a route around the audited writes to a function (its code reached through
gc's object walks or raw memory: ctypes, cffi, ``/proc/<pid>/mem``, another process): from then on every
check reads the watched functions' code and defaults too (the classes' namespaces are compared always)."""
_DIRTY_EVENTS = ("gc.get_referents", "gc.get_referrers", "gc.get_objects", "subprocess.Popen", "os.system",
                 "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.symlink", "os.link",
                 "ctypes.", "cffi.")
_RAW_MODULES = ("ctypes", "_ctypes", "cffi", "_cffi_backend")


def _raw(event, args):
    if event.startswith(_DIRTY_EVENTS):
        return True
    if event == "import":
        return bool(args) and str(args[0]).split(".", 1)[0] in _RAW_MODULES
    if event == "open" and args:  # process memory by path, however spelled (relative to a dir_fd...)
        name = os.fsdecode(args[0]) if isinstance(args[0], (str, bytes)) else ""
        return os.path.basename(name.rstrip("/")) == "mem"
    return False


if any(m in sys.modules for m in _RAW_MODULES):
    _dirty.append("a raw-memory module was loaded before the grader")


_QUIET = frozenset(("object.__getattr__", "builtins.id", "os.putenv", "os.unsetenv", "sys._getframe",
                    "compile", "exec", "marshal.loads", "marshal.dumps", "os.listdir", "os.scandir",
                    "time.sleep", "sys.settrace", "sys.setprofile"))
"""Events none of the checks below reads (reading a function's ``__code__`` is one: the guard's own walks
raise tens of thousands), answered first and at once."""


def _audit(event, args):
    if event in _QUIET:
        return
    if not _dirty:
        try:
            raw = _raw(event, args)
        except Exception:  # never fail the audited operation; unsure: compare everything
            raw = True
        if raw:
            _dirty.append(event)
    if event in _AUDIT_SETS:  # a function's __code__/__defaults__ (a class's special names) set: seen at once
        if args and id(args[0]) in _ids[0] and len(_pending) < _MAX_CHANGES and args[1] != "__slotnames__":
            target = args[0]
            _pending.append("%s %s.%s" % ("set" if event.endswith("setattr__") else "deleted",
                                          getattr(target, "__qualname__", "?"), args[1]))
        return
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
    new = sys.modules.keys() - _known  # (at C speed: nothing new, as before almost every report)
    for name in [n for n in list(sys.modules) if n in new] if new else ():
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
'''
