"""Upstream slime's own code at the pinned commit, imported for tests on one CPU process.

`upstream_slime` (a fixture) finds slime's source — ``SLIME_DIR`` (a checkout, as the launch scripts
take it) or ``SWE_SLIME_GIT`` (a git directory holding the commit of ``third_party/pins.env``, read with
``git archive`` into a cache folder) — and skips the test when there is neither. It stubs only what
cannot run here: Ray, SGLang, Megatron and the wandb logger (any import under those names gives an inert
module) with Megatron's ``mpu`` answering one rank, no tensor / context / pipeline parallelism. Nothing
of slime is copied into this repository; everything it imported is forgotten after the test, so other
tests keep running "without slime".
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUBBED = ("ray", "sglang", "megatron", "wandb")
"""Top-level packages replaced by inert modules: the cluster, the engine, the trainer, a logger."""


def pinned(name: str) -> str:
    """A value of ``third_party/pins.env`` (``SLIME_COMMIT``, ``MEGATRON_COMMIT``, ...)."""
    for line in (ROOT / "third_party" / "pins.env").read_text().splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"{name} missing from third_party/pins.env")


def pinned_commit() -> str:
    return pinned("SLIME_COMMIT")


def pinned_source(checkout_var: str, git_var: str, pin: str, package: str, marker: str) -> Path | None:
    """A folder holding ``package/`` at the pin: the checkout ``checkout_var`` names (when it has ``marker``),
    or the pinned commit of the git directory ``git_var`` names, read with ``git archive`` into a cache
    folder; None when neither is set."""
    checkout = os.environ.get(checkout_var)
    if checkout and (Path(checkout) / marker).exists():
        return Path(checkout)
    git_dir = os.environ.get(git_var)
    if not git_dir:
        return None
    commit = pinned(pin)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swe-rl" / f"{package}-{commit}"
    if not (cache / marker).exists():
        cache.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "--git-dir", git_dir, "archive", commit, package], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(cache)], input=archive, check=True)
    return cache


def slime_source() -> Path | None:
    """A folder holding slime's ``slime/`` package at the pin, or None."""
    return pinned_source("SLIME_DIR", "SWE_SLIME_GIT", "SLIME_COMMIT", "slime", "slime/__init__.py")


class _Inert(type):
    """A stand-in class: attributes are more stand-ins; used as a decorator it returns what it decorates."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return cls

    def __getitem__(cls, item: Any) -> Any:
        return cls


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _single_rank_mpu() -> types.ModuleType:
    mpu = types.ModuleType("megatron.core.mpu")
    for name in (
        "get_context_parallel_world_size",
        "get_data_parallel_world_size",
        "get_tensor_model_parallel_world_size",
        "get_pipeline_model_parallel_world_size",
    ):
        setattr(mpu, name, lambda *a, **k: 1)
    for name in ("get_context_parallel_rank", "get_tensor_model_parallel_rank", "get_data_parallel_rank"):
        setattr(mpu, name, lambda *a, **k: 0)
    for name in ("get_tensor_model_parallel_group", "get_context_parallel_group", "get_data_parallel_group"):
        setattr(mpu, name, lambda *a, **k: None)
    mpu.is_pipeline_last_stage = lambda *a, **k: True  # type: ignore[attr-defined]
    mpu.is_pipeline_first_stage = lambda *a, **k: True  # type: ignore[attr-defined]
    return mpu


@pytest.fixture
def upstream_slime(monkeypatch) -> Any:
    """``import_module(name)`` of slime at the pin (e.g. ``slime.backends.megatron_utils.loss``)."""
    pytest.importorskip("torch")
    source = slime_source()
    if source is None:
        pytest.skip("slime's source is not here: set SLIME_DIR (a checkout) or SWE_SLIME_GIT (a git dir)")
    before = set(sys.modules)
    ours = ("slime", *STUBBED)
    # a failed `import slime` elsewhere may have left a namespace package (tests/slime) under that name
    shadowed = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ours}
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    monkeypatch.syspath_prepend(str(source))
    megatron_core = importlib.import_module("megatron.core")
    mpu = _single_rank_mpu()
    megatron_core.mpu = mpu  # type: ignore[attr-defined]
    sys.modules["megatron.core.mpu"] = mpu
    try:
        yield importlib.import_module
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before | set(shadowed):
            if name.split(".")[0] in ours:
                sys.modules.pop(name, None)
        sys.modules.update(shadowed)
