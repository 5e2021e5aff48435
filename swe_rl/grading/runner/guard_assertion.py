"""The source of the runner guard's watch on pytest's per-test assertion hooks (`runner_guard` says what it
checks and why): part of the probe plugin's source, between the guard's watch on imports and its checks
(`guard_plugin.GUARD_SOURCE`); it uses the walk's ``_UTIL``, ``_VOLATILE``, ``_EMPTY`` and ``_hookimpl``,
and the checks use its ``_util_same`` and ``_volatile_moved``.

``_pytest.assertion.util``'s ``_reprcompare``, ``_assertion_pass`` and ``_config`` are what a rewritten
assert calls to explain a failed comparison. pytest sets them around each test's protocol (5.4 on; before,
in its setup hook, after the test's fixtures may have run: not compared there), so they are compared with
what they were as the test's protocol began, not with the session's snapshots.

Written for every Python the images carry (3.5+): no f-strings, no annotations.
"""

from __future__ import annotations

__all__ = ["ASSERTION_SOURCE"]

ASSERTION_SOURCE = '''
def _util_same(w):
    """``_pytest.assertion.util`` as watched, but its per-test hooks as they were at the test's start."""
    util, was = w["util"], w["util_was"]
    if util is None:
        return True
    if len(util) != len(was) + sum(1 for k in _VOLATILE if k in util):
        return False
    return all(util.get(k, _EMPTY) is v for k, v in was.items())


def _volatile_moved():
    """pytest's per-test assertion hooks that are not what its protocol set as the test began."""
    util = sys.modules.get(_UTIL)
    if not _volatile or util is None:
        return []
    return [k for k, v in zip(_VOLATILE, _volatile) if vars(util).get(k, _EMPTY) is not v]


_volatile = []


@_hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid, location):
    """pytest's per-test assertion hooks as its protocol set them, before any of the test's code."""
    util, plugin = sys.modules.get(_UTIL), sys.modules.get("_pytest.assertion")
    if util is not None and hasattr(plugin, "pytest_runtest_protocol"):
        _volatile[:] = [vars(util).get(k, _EMPTY) for k in _VOLATILE]
'''
