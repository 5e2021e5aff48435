"""Every shell script of the repository is shellcheck-clean, each checked once (slow tier: seconds per script)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed"),
]

SCRIPTS = sorted(
    {
        *ROOT.glob("scripts/*.sh"),
        *ROOT.glob("scripts/lib/*.sh"),
        *ROOT.glob("scripts/models/*.sh"),
        *ROOT.glob("server/*.sh"),
        *ROOT.glob("eval/*.sh"),
        *ROOT.glob("data/*.sh"),
        ROOT / ".ci/run",
    }
)


def test_the_list_covers_every_kind_of_script():
    names = {str(p.relative_to(ROOT)) for p in SCRIPTS}
    assert {
        "scripts/test.sh",
        "scripts/lib/swe_rl_common.sh",
        "scripts/models/qwen3-8B.sh",
        "server/setup_docker_node.sh",
        "eval/run_eval_swe.sh",
        "data/pull_swe_images.sh",
        ".ci/run",
    } <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck_clean(script):
    p = subprocess.run(
        ["shellcheck", "-x", "--severity=style", str(script)],
        capture_output=True,
        text=True,
        cwd=script.parent,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
