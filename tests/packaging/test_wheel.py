"""The package installs like any Python project: a built wheel, installed in a fresh venv, runs from
outside the checkout (imports, every console script's --help, shipped configs read from the wheel).

The wheel is built from a temporary copy of what it is made of (pyproject.toml, README.md, swe_rl/,
configs/), so the build leaves nothing in the checkout; the venv sees the machine's site-packages for the
dependencies, but swe_rl itself must come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tomllib

from tests.conftest import ROOT
from tests.package_copy import copy_package_sources

pytestmark = pytest.mark.slow

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

# Run inside the venv, from a directory outside the checkout.
CHECK_INSTALLED = """
import json, sys
# An editable install of a checkout on this machine (seen through --system-site-packages) adds a
# meta-path finder that would quietly serve modules missing from the wheel: take it out.
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
from pathlib import Path
from importlib.metadata import distribution
import swe_rl, swe_rl.fleet.exec.app, swe_rl.fleet.pool.app, swe_rl.slime.e2e, swe_rl.eval.eval_swe, swe_rl.data.preprocess_swe_dataset
from swe_rl.configs import config_path, config_text
from swe_rl.harnesses import BashBlockHarness
from swe_rl.slime.config import PluginConfig
from swe_rl.rewards.prm import PRMConfig

prefix = Path(sys.prefix).resolve()
config = PluginConfig.from_sources(None, env={})
print(json.dumps({
    "package": swe_rl.__file__,
    "eval": swe_rl.eval.eval_swe.__file__,
    "config": str(config_path("plugin_swe.yaml")),
    "config_text": "swe_chat_template" in config_text("plugin_swe.yaml"),
    "chat_template": config.chat_template,
    "old_style_name": PRMConfig(template="configs/prm_judge.yaml").template,
    "harness_prompt": bool(BashBlockHarness().config.system_template),
    "scripts": sorted(e.name for e in distribution("swe-rl").entry_points if e.group == "console_scripts"),
    "prefix": str(prefix),
}))
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, venv bin dir, a work dir outside the checkout, a clean environment)."""
    tmp = tmp_path_factory.mktemp("wheel")
    try:
        src = copy_package_sources(tmp / "src")
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
        built = run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)],
            tmp,
            env,
            timeout=300,
        )
        assert built.returncode == 0, built.stdout + built.stderr
        wheel = next((tmp / "dist").glob("swe_rl-*.whl"))

        venv = tmp / "venv"
        made = run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], tmp, env
        )
        assert made.returncode == 0, made.stderr
        python = venv / "bin" / "python"
        # The machine's pip (visible through --system-site-packages) installs into the venv.
        inst = run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
            tmp,
            env,
        )
        assert inst.returncode == 0, inst.stdout + inst.stderr
        work = tmp / "elsewhere"
        work.mkdir()
        yield python, venv / "bin", work, env
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_wheel_imports_and_reads_its_configs_outside_the_checkout(installed):
    import json

    python, _, work, env = installed
    p = run([str(python), "-c", CHECK_INSTALLED], work, env)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    prefix = got["prefix"]
    for key in ("package", "eval", "config", "chat_template", "old_style_name"):
        assert Path(got[key]).resolve().is_relative_to(prefix), (
            key,
            got[key],
        )  # the wheel's, not the checkout's
        assert not Path(got[key]).resolve().is_relative_to(ROOT), (key, got[key])
    assert got["config_text"] and got["harness_prompt"]
    assert got["scripts"] == sorted(SCRIPTS)


def test_every_console_script_answers_help(installed):
    _, bin_dir, work, env = installed

    def help_of(name: str) -> tuple[str, subprocess.CompletedProcess]:
        return name, run([str(bin_dir / name), "--help"], work, env)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(help_of, sorted(SCRIPTS)))
    for name, p in results:
        assert p.returncode == 0, (name, p.stderr[-2000:])
        assert "usage:" in p.stdout, (name, p.stdout[:500])
