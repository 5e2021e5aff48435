"""Samples of the mined set (data/mined_tasks/instances.jsonl) graded in containers, once per machine.

The release-anchored rows (``release`` set: data/mined_tasks/releases.tsv) are the sample CI grades for
real: their base is a release's sdist as the registry publishes it (``pip download``, sha256 pinned),
so data/mined_tasks/build.sh builds their images from what CI reaches (the task commit is made again
from the row's patches and checked against its ``mined_commit``). Gold resolves, the empty patch does
not, and our verdicts equal swebench 5.x's; the adversarial suite plays on them in
test_mined_tasks_adversarial.py. Under ``CI=true`` a release that cannot be downloaded is a failure;
elsewhere the test skips and says so. An image is named after its row's id, whose commit part is the
sha of the release tree plus the task's patches: a different sdist or patch is another image, the
same one is kept (built once per machine).

The mirror-based sample is an extra: one row per language (the first of each in the file's order): its task image is built by
data/mined_tasks/build.sh --rows (offline, FROM the toolchain/base image, from a clone of the
upstream repository; kept once built), then the gold patch resolves, the empty patch does not, and
our verdict and per-test maps equal swebench 5.x's own on the same logs. The full set was certified
when it was mined (gold twice, the empty patch once, on the fleet: data/mined_tasks/README.md);
this keeps the check cheap. Without the upstream repositories' clones (``SWE_MINED_MIRRORS``, by
default /work/.mirror) and without the images, it skips and says so (CI has no clones: GitHub is not
reachable there).
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
RELEASES = {  # package==version -> (name, repo, sha256, upstream commit)
    cells[3]: (cells[0], cells[1], cells[4], cells[5])
    for cells in (ln.split("\t") for ln in (SET / "releases.tsv").read_text().splitlines())
    if cells[0].strip() and not cells[0].startswith("#")
}
RELEASE_ROWS = [r for r in ROWS if r.get("release")]
FULL_MATRIX = os.environ.get("SWE_TEST_FULL_MATRIX", "") not in ("", "0")
SAMPLE_MAX_TESTS = 200
"""By default the first release row of each language whose tests (FAIL_TO_PASS + PASS_TO_PASS) are at most
this many: a run of seconds (more-itertools' 576 tests, goldmark's 682: minutes on a loaded machine), and
one row per language keeps CI's share small; every release row under the full matrix
(``SWE_TEST_FULL_MATRIX=1``)."""


def _tests(row: dict) -> int:
    return sum(
        len(json.loads(v) if isinstance(v, str) else v) for v in (row["FAIL_TO_PASS"], row["PASS_TO_PASS"])
    )


def _release_sample() -> list[dict]:
    if FULL_MATRIX:
        return RELEASE_ROWS
    chosen: dict[str, dict] = {}
    for row in RELEASE_ROWS:
        if _tests(row) <= SAMPLE_MAX_TESTS:
            chosen.setdefault(row["language"], row)
    return list(chosen.values())


RELEASE_SAMPLE = _release_sample()
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _one_per_language() -> list[dict]:
    chosen: dict[str, dict] = {}
    for row in ROWS:
        if row.get("release") or row.get("env_image"):
            continue  # the release sample is graded on its own; an environment's install needs the network
        chosen.setdefault(row["language"], row)
    return list(chosen.values())


SAMPLE = _one_per_language()


def test_the_sample_has_one_row_of_each_language_of_the_set():
    assert {r["language"] for r in SAMPLE} == {r["language"] for r in ROWS} and len(SAMPLE) >= 3


def test_the_release_sample_is_several_rows_each_on_a_pinned_release():
    lines = [ln.split("\t") for ln in (SET / "releases.tsv").read_text().splitlines() if ln and ln[0] != "#"]
    # one line per release: build.sh makes a release's rows again with its line's upstream commit
    assert len(lines) == len(RELEASES) == len({cells[0] for cells in lines})
    assert {cells[2] for cells in lines} <= {"pypi", "debian"}
    assert len({r["language"] for r in RELEASE_SAMPLE}) >= 2 and len({r["repo"] for r in RELEASE_SAMPLE}) >= 2
    assert len(RELEASE_ROWS) > len(RELEASE_SAMPLE) or FULL_MATRIX  # more-itertools': the full matrix's
    for row in RELEASE_ROWS:
        name, repo, sha256, commit = RELEASES[row["release"]]
        assert repo == row["repo"] and len(sha256) == 64 and len(commit) == 40, name
        assert row["patch"].strip() and row["test_patch"].strip(), name


def build_rows(
    rows: list[dict], names: list[str], where: Path, env: dict[str, str]
) -> subprocess.CompletedProcess:
    """data/mined_tasks/build.sh --rows for ``rows`` of the sources or releases ``names``."""
    file = where / "rows.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return subprocess.run(
        ["bash", str(SET / "build.sh"), "--rows", str(file), *names],
        capture_output=True, text=True, check=False, env={**os.environ, "PYTHON": sys.executable, **env},
        timeout=3600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def release_images(docker_client, base_image, tmp_path_factory):
    """The release sample's images (kept once built); under CI a release not downloadable fails."""
    names = sorted({RELEASES[r["release"]][0] for r in RELEASE_SAMPLE})
    proc = build_rows(RELEASE_SAMPLE, names, tmp_path_factory.mktemp("releases"), {})
    judge_release_build(proc, in_ci=IN_CI)


def judge_release_build(proc: subprocess.CompletedProcess, *, in_ci: bool) -> None:
    """A failed build fails the test; a download that failed skips it, except under CI."""
    if proc.returncode != 0 and "cannot download" in proc.stderr and not in_ci:
        pytest.skip(f"the release sample's tarballs cannot be downloaded here: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, (
        "the release sample's images could not be built from the releases of data/mined_tasks/releases.tsv"
        f" (download, sha256, the task commit made again): {proc.stderr[-3000:]}{proc.stdout[-2000:]}"
    )


def test_a_release_that_cannot_be_downloaded_fails_under_ci_and_skips_elsewhere():
    failed = subprocess.CompletedProcess(
        [], 1, "", "error: cannot download the sdist of parse==1.20.1 (pip download)"
    )
    with pytest.raises(AssertionError, match="could not be built .* cannot download the sdist"):
        judge_release_build(failed, in_ci=True)
    with pytest.raises(pytest.skip.Exception, match="cannot be downloaded here"):
        judge_release_build(failed, in_ci=False)
    other = subprocess.CompletedProcess(
        [], 1, "", "error: the tarball of parse==1.20.1 has sha256 0; releases.tsv pins 1"
    )
    with pytest.raises(AssertionError, match="releases.tsv pins"):
        judge_release_build(other, in_ci=False)
    judge_release_build(subprocess.CompletedProcess([], 0, "", ""), in_ci=True)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("row", RELEASE_SAMPLE, ids=[r["instance_id"] for r in RELEASE_SAMPLE])
def test_on_a_release_gold_resolves_the_empty_patch_does_not_and_maps_equal_swebench(
    official,  # noqa: F811 - the imported fixture
    release_images,
    tmp_path,
    row,
):
    gold_and_empty_as_swebench(official, instance_from_row(row), tmp_path)


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
    proc = build_rows(missing, names, tmp_path_factory.mktemp("mined"), {"SWE_MINED_MIRRORS": str(mirrors)})
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
