"""A sample of the mined set (data/mined_tasks/instances.jsonl) graded in containers, once per machine.

One row per language (the first of each in the file's order): its task image is built by
data/mined_tasks/build.sh --rows (offline, FROM the toolchain/base image, from a clone of the
upstream repository; kept once built), then the gold patch resolves, the empty patch does not, and
our verdict and per-test maps equal swebench 5.x's own on the same logs. The full set was certified
when it was mined (gold twice, the empty patch once, on the fleet: data/mined_tasks/README.md);
this keeps the check cheap. Without the upstream repositories' clones (``SWE_MINED_MIRRORS``, by
default /work/.mirror) and without the images, the test skips and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.tasks import instance_from_row
from tests.grading.test_official_5x import ROOT, official  # noqa: F401 - official: a fixture
from tests.grading.test_real_tasks import gold_and_empty_as_swebench

SET = ROOT / "data/mined_tasks"
ROWS = [json.loads(ln) for ln in (SET / "instances.jsonl").read_text().splitlines() if ln.strip()]
SOURCES = {
    ln.split("\t")[1]: ln.split("\t")[0]
    for ln in (SET / "sources.tsv").read_text().splitlines()
    if ln.strip() and not ln.startswith("#")
}


def _one_per_language() -> list[dict]:
    chosen: dict[str, dict] = {}
    for row in ROWS:
        chosen.setdefault(row["language"], row)
    return list(chosen.values())


SAMPLE = _one_per_language()


def test_the_sample_has_one_row_of_each_language_of_the_set():
    assert {r["language"] for r in SAMPLE} == {r["language"] for r in ROWS} and len(SAMPLE) >= 3


def _image_exists(image: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode
        == 0
    )


@pytest.fixture(scope="module")
def sample_images(docker_client, base_image, tmp_path_factory):
    missing = [r for r in SAMPLE if not _image_exists(r["image"])]
    if not missing:
        return
    mirrors = Path(os.environ.get("SWE_MINED_MIRRORS", "/work/.mirror"))
    names = sorted({SOURCES[r["repo"]] for r in missing})
    absent = [n for n in names if not (mirrors / n / "repo").is_dir()]
    if absent:
        pytest.skip(
            f"the sample's images need clones of {', '.join(absent)} under {mirrors} (SWE_MINED_MIRRORS)"
        )
    rows = tmp_path_factory.mktemp("mined") / "sample.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in missing))
    env = {**os.environ, "PYTHON": sys.executable, "SWE_MINED_MIRRORS": str(mirrors)}
    proc = subprocess.run(
        ["bash", str(SET / "build.sh"), "--rows", str(rows), *names],
        capture_output=True, text=True, check=False, env=env, timeout=3600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("row", SAMPLE, ids=[r["instance_id"] for r in SAMPLE])
def test_gold_resolves_the_empty_patch_does_not_and_maps_equal_swebench(
    official,  # noqa: F811 - the imported fixture
    sample_images,
    tmp_path,
    row,
):
    gold_and_empty_as_swebench(official, instance_from_row(row), tmp_path)
