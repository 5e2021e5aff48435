"""The old documented slime entry points still resolve (as slime resolves them: module path + attribute), warn on
import, and are the new ones; nothing in the package imports them."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.slime import e2e, pivot, post_process, reward

ROOT = Path(__file__).resolve().parents[2]
OLD = {
    "swe_rl.slime_plugin": {"generate": e2e.generate, "reward_func": reward.reward_func},
    "swe_rl.pivot": {"generate": pivot.generate, "reward_func": reward.reward_func},
    "swe_rl.advantages": {"post_process_rewards": post_process.post_process_rewards},
}


@pytest.mark.parametrize("module", sorted(OLD))
def test_old_path_resolves_to_the_new_function_and_warns(module):
    sys.modules.pop(module, None)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        old = importlib.import_module(module)
    for name, new in OLD[module].items():
        assert getattr(old, name) is new


@pytest.mark.slow  # imports every module of the package in a fresh interpreter
def test_the_package_imports_none_of_the_aliases():
    code = (
        "import sys, warnings; warnings.simplefilter('error', DeprecationWarning); "
        "import swe_rl.slime.e2e, swe_rl.slime.pivot, swe_rl.slime.reward, swe_rl.slime.post_process, "
        "swe_rl.slime.filters, swe_rl.slime.metrics, swe_rl.slime.agent_generate; "
        f"print(sorted(m for m in {sorted(OLD)!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    pattern = r"(from|import) swe_rl(\.| import )(slime_plugin|pivot|advantages)\b"
    found = subprocess.run(
        ["git", "grep", "-l", "-E", pattern, "--", "swe_rl", "eval", "data", "bench", "server"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert found.stdout.split() == []
