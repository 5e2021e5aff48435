"""An eval over more images than the node's disk budget holds, pulling from a real registry on loopback:
every instance resolves (no failed allocate, no env_error) and the node ends within its budget."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess

import httpx
import pytest
from registry_fixtures import forget_image

from swe_rl.eval import eval_swe
from swe_rl.fleet.exec.docker_backend import DockerImages
from swe_rl.fleet.exec.image_disk import bytes_used
from swe_rl.fleet.local import LocalFleet
from swe_rl.testing.local_registry import build_layer_image, remove_test_images
from tests.conftest import ROOT

FIXTURES = ROOT / "data/fixtures/instances.jsonl"
CHOSEN = ("jpvanhal__inflection-9001", "more-itertools__more-itertools-9001", "pytoolz__toolz-9001")


@pytest.fixture
def registry_rows(docker_client, base_image, local_registry, tmp_path):
    """Three fixture instances whose images (the fixture image plus a small layer) are only in the registry."""
    subprocess.run(["bash", str(ROOT / "data/build_fixture_images.sh")], check=True, capture_output=True)
    run = f"h-images-{secrets.token_hex(3)}"
    rows, refs, infos = [], [], []
    images = DockerImages(docker_client)
    try:
        for line in FIXTURES.read_text().splitlines():
            row = json.loads(line)
            if row["instance_id"] not in CHOSEN:
                continue
            name = f"swe-rl-test/{run}-{len(refs)}:1"
            build_layer_image(docker_client, row["image_name"], name, run, 1 << 20)
            infos.append(images.image_info(name))
            refs.append(local_registry.push(docker_client, name, name))
            docker_client.images.remove(name)
            rows.append({**row, "image_name": refs[-1]})
        data = tmp_path / "instances.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        yield data, bytes_used(i for i in infos if i is not None)
    finally:
        for ref in refs:
            forget_image(docker_client, ref)
        remove_test_images(docker_client, run)


def test_eval_over_more_images_than_the_budget(registry_rows, local_registry, tmp_path):
    data, all_three = registry_rows
    budget = all_three - 1  # the three task images never fit at once
    env = {
        "SWE_EXEC_ALLOW_PULL": "1",
        "SWE_EXEC_IMAGE_PREFIXES": local_registry.host + "/",
        "SWE_EXEC_IMAGE_DISK_BUDGET": str(budget),
        "SWE_EXEC_MAX_WARM": "0",
    }
    with LocalFleet(exec_servers=1, max_containers_per_node=4, exec_env=env) as fleet:
        args = eval_swe.parse_args(
            [
                "--data",
                str(data),
                "--output-dir",
                str(tmp_path / "out"),
                "--max-concurrent",
                "1",
                "--no-progress",
            ]
        )
        summary = asyncio.run(eval_swe.run(args, fleet.client_env()))
        stats = httpx.get(fleet.exec_urls[0] + "/healthz", timeout=30).json()["images"]
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in results] == ["resolved"] * 3, summary
    assert stats["evictions"] >= 1 and stats["pulls_failed"] == 0, (stats, budget)
    assert stats["bytes_used"] <= budget
