"""swebench 4.1.0 for the tests of older rows, beside the pinned 5.x.

Rows written for swebench 4.x carry no eval script: their scripts come from 4.x's repo/version specs,
which 5.x dropped. scripts/install_package.sh puts 4.1.0 in a folder of its own
(``~/.cache/swe-rl/swebench-4.1.0``, or ``SWE_SWEBENCH4_DIR``); the `swebench_4` fixture makes it the
``swebench`` that imports for one test (our code imports swebench inside functions, so it sees the
swap) and gives 5.x back afterwards. Without the folder the test skips, saying how to get it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def side_folder() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swe-rl" / "swebench-4.1.0"
    return Path(os.environ.get("SWE_SWEBENCH4_DIR", default))


def _swebench_modules() -> dict[str, ModuleType]:
    return {k: m for k, m in sys.modules.items() if k == "swebench" or k.startswith("swebench.")}


@pytest.fixture
def swebench_4() -> Iterator[ModuleType]:
    """The ``swebench`` package at 4.1.0 for this test (its specs: MAP_REPO_VERSION_TO_SPECS)."""
    folder = side_folder()
    if not (folder / "swebench" / "__init__.py").is_file():
        pytest.skip(f"swebench 4.1.0 is not in {folder} (bash scripts/install_package.sh puts it there)")
    before = _swebench_modules()
    for name in before:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    try:
        import swebench
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # noqa: F401  (4.x only)

        assert swebench.__version__.startswith("4."), swebench.__version__
        yield swebench
    finally:
        sys.path.remove(str(folder))
        for name in _swebench_modules():
            del sys.modules[name]
        sys.modules.update(before)
