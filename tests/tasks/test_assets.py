"""A row's image_assets (swe_rl.tasks.assets): fetched, and written by the eval script before the tests run."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from task_rows import fixture_row

from swe_rl.tasks import instance_from_row
from swe_rl.tasks.assets import declared_assets, fetch_assets, with_assets

PNG = bytes(range(256)) * 3 + b"\n\x00EOF_x\n"  # any bytes, newlines and a delimiter-looking tail included
SCRIPT = (
    "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\n"
    "sha256sum tests/baseline/expected.png\n: '>>>>> End Test Output'\n"
)


def row_with_assets(tmp_path, **over):
    src = tmp_path / "expected.png"
    src.write_bytes(PNG)
    assets = {
        "test_patch": [{"path": "tests/baseline/expected.png", "url": src.as_uri()}],
        "patch": [{"url": "x"}],
    }
    return fixture_row(image_assets=json.dumps(assets), eval_script=SCRIPT, **over)


def test_assets_are_read_from_the_row_and_fetched(tmp_path):
    inst = instance_from_row(row_with_assets(tmp_path))
    assert declared_assets(inst) == [
        {"path": "tests/baseline/expected.png", "url": (tmp_path / "expected.png").as_uri()}
    ]
    assert fetch_assets(inst) == {"tests/baseline/expected.png": PNG}
    mirror = tmp_path / "mirror" / inst.instance_id / "tests/baseline"
    mirror.mkdir(parents=True)
    (mirror / "expected.png").write_bytes(b"mirrored")
    assert fetch_assets(inst, tmp_path / "mirror") == {"tests/baseline/expected.png": b"mirrored"}
    gone = instance_from_row(row_with_assets(tmp_path, instance_id="a__b-2"))
    (tmp_path / "expected.png").unlink()
    assert fetch_assets(gone) == {}  # logged, the run goes on without it (as swebench 5.x)
    assert with_assets(SCRIPT, {}) == SCRIPT
    with pytest.raises(ValueError, match="image_assets"):
        instance_from_row(fixture_row(image_assets="{not json"))


@pytest.mark.docker
def test_the_script_writes_the_asset_before_the_tests_in_a_real_container(docker_client, tmp_path):
    inst = instance_from_row(
        row_with_assets(tmp_path, image_name="swe-rl/fixture.pytoolz_1776_toolz-9001:latest")
    )
    script = with_assets(inst.eval_script or "", fetch_assets(inst))
    assert script.index("base64 -d") < script.index(">>>>> Start Test Output")
    proc = subprocess.run(
        ["docker", "run", "-i", "--rm", "--name", "h-sb5-assets", "--label", "swe-rl.test=h-sb5",
         "--network", "none", inst.image, "/bin/bash", "-s"],
        input=script, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert f"{hashlib.sha256(PNG).hexdigest()}  tests/baseline/expected.png" in proc.stdout, (
        proc.stdout + proc.stderr
    )
