"""data/clean_image_history.py: the once-per-image clean-up, on a temporary tag of the future-history fixture."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUTURE = "swe-rl/fixture.jpvanhal_1776_inflection-9002:latest"
CLEAN = "swe-rl/fixture.jpvanhal_1776_inflection-9001:latest"


def test_future_history_is_committed_away_once_and_clean_images_are_left_alone(docker_client):
    for image in (FUTURE, CLEAN):
        docker_client.images.get(image)  # built by data/build_fixture_images.sh
    tmp = f"swe-rl/pytest-h15-clean-{secrets.token_hex(3)}"
    docker_client.images.get(FUTURE).tag(tmp, "src")
    try:
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "data/clean_image_history.py"),
                f"{tmp}:src",
                CLEAN,
                "--suffix=-clean",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr
        assert f"{tmp}:src: cleaned -> {tmp}:src-clean" in out.stdout and f"{CLEAN}: clean" in out.stdout
        log = (
            docker_client.containers.run(
                f"{tmp}:src-clean",
                [
                    "bash",
                    "-c",
                    "git log --all --oneline | wc -l; "
                    "git cat-file --batch-all-objects --batch | grep -c MARKER; pwd",
                ],
                remove=True,
                network_mode="none",
            )
            .decode()
            .split()
        )
        assert log == ["1", "0", "/testbed"]
        assert not docker_client.images.list(name=CLEAN.replace(":latest", "") + ":latest-clean")
    finally:
        for tag in ("src", "src-clean"):
            try:
                docker_client.images.remove(f"{tmp}:{tag}", force=True)
            except Exception:  # noqa: BLE001 - not created
                pass
