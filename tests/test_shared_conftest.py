"""The shared test module is loaded once, whichever name imports it."""

from __future__ import annotations

import importlib
import socket
import sys
from pathlib import Path


def test_conftest_is_one_module_under_both_names(request):
    """The module pytest runs the shared fixtures from is the one `from tests.conftest import` gives
    (imported once more it would keep a second port walk and a second session prefix)."""
    from tests.conftest import TEST_ID_PREFIX

    path = Path(__file__).with_name("conftest.py").resolve()
    loaded = [
        m for m in request.config.pluginmanager.get_plugins() if getattr(m, "__file__", None) == str(path)
    ]
    copies = {id(m) for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path)}
    assert len(loaded) == 1 and copies == {id(loaded[0])}
    assert importlib.import_module("tests.conftest") is loaded[0]
    assert loaded[0].TEST_ID_PREFIX == TEST_ID_PREFIX


def test_free_port_never_hands_out_a_port_twice():
    from tests.conftest import free_port

    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and all(p < 32768 for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))
