"""Environments with dependencies, built for real (issue 49, item 1): a tiny Python project that needs one
package from the index (``six``), mined with ``--with-deps``. The environment is installed as of the
commits' date (pytest 8.0 came out on 2024-01-27: a January 2024 environment has pytest 7.4), shared by
both candidates, and the task images are thin layers on top; the row names its environment and
``--images-for`` builds it again. Needs Docker and the package index (skipped when unreachable); the
environment toolchain image (Debian's venv, uv) is built once per machine."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from swe_rl.eval.mining.cli import Miner, main, parse_args
from swe_rl.eval.mining.envs import ENV_LABEL, EnvFailed, _ca_bundle, toolchain
from tests.eval.mining_repos import make_history

pytestmark = [pytest.mark.docker]

PYPROJECT = '[project]\nname = "textcalc"\nversion = "0.1"\ndependencies = ["six"]\n'
CODE_BUGGY = "import six\n\n\ndef is_text(x):\n    return isinstance(x, six.binary_type)\n\n\ndef double(x):\n    return 2 * x\n"
CODE_FIXED = CODE_BUGGY.replace("binary_type", "text_type")
TESTS = "from textcalc import double\n\n\ndef test_double():\n    assert double(2) == 4\n"
TESTS_MORE = TESTS + "\n\ndef test_is_text():\n    from textcalc import is_text\n\n    assert is_text('a')\n"
TRIPLE = CODE_FIXED + "\n\ndef triple(x):\n    return 3 * x\n"
TESTS_TRIPLE = (
    TESTS_MORE + "\n\ndef test_triple():\n    from textcalc import triple\n\n    assert triple(2) == 6\n"
)


def _index_reachable() -> bool:
    """The environment toolchain image can be made and uv in it resolves one package from the index."""
    try:
        image = toolchain("python")
    except EnvFailed:
        return False
    ca = _ca_bundle()
    mount = ["-v", f"{ca}:/run/ca.crt:ro", "-e", "SSL_CERT_FILE=/run/ca.crt"] if ca else []
    probe = subprocess.run(
        ["docker", "run", "--rm", "-i", *mount, image, "uv", "pip", "compile", "-q", "-"],
        input="six\n", capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    return probe.returncode == 0


def _images(prefix: str) -> list[str]:
    out = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return [i for i in out if i.startswith(prefix)]


@pytest.mark.slow
def test_a_project_with_a_dependency_is_mined_on_an_environment_of_its_date(tmp_path, base_image):
    if not _index_reachable():
        pytest.skip("the package index is not reachable from a container")
    repo = tmp_path / "repo"
    shas = make_history(
        repo,
        [
            (
                "2024-01-02T00:00:00+00:00",
                {"pyproject.toml": PYPROJECT, "textcalc.py": CODE_BUGGY, "tests/test_t.py": TESTS},
            ),
            ("2024-01-03T00:00:00+00:00", {"textcalc.py": CODE_FIXED, "tests/test_t.py": TESTS_MORE}),
            ("2024-01-04T00:00:00+00:00", {"textcalc.py": TRIPLE, "tests/test_t.py": TESTS_TRIPLE}),
        ],
    )
    tag = uuid.uuid4().hex[:8]
    out = tmp_path / "tasks.jsonl"
    argv = [str(repo), "--output", str(out), "--repo-name", f"swe-rl-test-env/{tag}", "--with-deps",
            "--no-certify", "--no-progress", "--jobs", "2", "--image-template", f"swe-rl/test-env-{tag}.{{id}}:latest",
            "--name-prefix", f"swe-rl-test-env-{tag}"]  # fmt: skip
    try:
        stats = Miner(parse_args(argv)).run()
        assert stats["counts"]["validated"] == 2, out.with_suffix(".drops.jsonl").read_text()
        rows = {
            r["mined_commit"]: r
            for r in map(json.loads, out.with_suffix(".validated.jsonl").read_text().splitlines())
        }
        fix, triple = rows[shas[1]], rows[shas[2]]
        assert fix["FAIL_TO_PASS"] == ["tests/test_t.py::test_is_text"]  # six imported: installed
        assert fix["PASS_TO_PASS"] == ["tests/test_t.py::test_double"]
        assert triple["FAIL_TO_PASS"] == ["tests/test_t.py::test_triple"]
        env = fix["env_image"]
        assert triple["env_image"] == env and env.startswith(f"swe-rl/env.swe-rl-test-env__{tag}:")  # shared
        version = subprocess.run(["docker", "run", "--rm", env, "python3", "-m", "pytest", "--version"],
                                 capture_output=True, text=True, check=True)  # fmt: skip
        assert "pytest 7.4." in version.stdout + version.stderr  # as of January 2024, not today's
        label = subprocess.run(["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{ENV_LABEL}"}}}}', env],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        assert label and label in env

        # the task image is a thin layer: the environment's layers are its own first ones
        def layers(image: str) -> list[str]:
            return json.loads(subprocess.run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", image],
                                             capture_output=True, text=True, check=True).stdout)  # fmt: skip

        assert layers(fix["image"])[: len(layers(env))] == layers(env)
        # a fresh machine: the task image built again from the row, on the same environment
        subprocess.run(["docker", "rmi", "-f", fix["image"]], capture_output=True, check=True)
        rows_file = tmp_path / "rows.jsonl"
        rows_file.write_text(json.dumps(fix) + "\n")
        assert main([str(repo), "--output", str(tmp_path / "x.jsonl"), "--images-for", str(rows_file)]) == 0
        rows_file.write_text(json.dumps({**fix, "env_image": env + "x"}) + "\n")
        assert main([str(repo), "--output", str(tmp_path / "x.jsonl"), "--images-for", str(rows_file)]) == 1
    finally:
        mine = _images(f"swe-rl/test-env-{tag}.") + _images(f"swe-rl/env.swe-rl-test-env__{tag}:")
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True, check=False)
    assert not _images(f"swe-rl/env.swe-rl-test-env__{tag}:")


@pytest.mark.slow
def test_an_install_that_fails_drops_its_candidates_with_the_log_tail(tmp_path: Path, base_image):
    if not _index_reachable():
        pytest.skip("the package index is not reachable from a container")
    repo = tmp_path / "repo"
    bad = PYPROJECT.replace('["six"]', '["swe-rl-no-such-package-0f3c"]')
    shas = make_history(
        repo,
        [
            (
                "2024-01-02T00:00:00+00:00",
                {"pyproject.toml": bad, "textcalc.py": CODE_BUGGY, "tests/test_t.py": TESTS},
            ),
            ("2024-01-03T00:00:00+00:00", {"textcalc.py": CODE_FIXED, "tests/test_t.py": TESTS_MORE}),
        ],
    )
    tag = uuid.uuid4().hex[:8]
    out = tmp_path / "tasks.jsonl"
    argv = [str(repo), "--output", str(out), "--repo-name", f"swe-rl-test-env/{tag}", "--with-deps", "--no-certify",
            "--no-progress", "--image-template", f"swe-rl/test-env-{tag}.{{id}}:latest"]  # fmt: skip
    try:
        assert Miner(parse_args(argv)).run()["counts"]["built"] == 0
        (drop,) = [json.loads(line) for line in out.with_suffix(".drops.jsonl").read_text().splitlines()[1:]]
        assert drop["commit"] == shas[1] and drop["stage"] == "env"
        assert "the install failed" in drop["reason"] and "swe-rl-no-such-package-0f3c" in drop["reason"]
    finally:
        mine = _images(f"swe-rl/test-env-{tag}.") + _images(f"swe-rl/env.swe-rl-test-env__{tag}:")
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True, check=False)


@pytest.mark.docker
def test_a_build_that_outlasts_the_timeout_drops_its_candidate_and_the_run_goes_on(tmp_path: Path):
    repo = tmp_path / "repo"
    shas = make_history(
        repo,
        [
            (
                "2024-01-02T00:00:00+00:00",
                {"pyproject.toml": PYPROJECT, "textcalc.py": CODE_BUGGY, "tests/test_t.py": TESTS},
            ),
            ("2024-01-03T00:00:00+00:00", {"textcalc.py": CODE_FIXED, "tests/test_t.py": TESTS_MORE}),
        ],
    )
    tag = uuid.uuid4().hex[:8]
    out = tmp_path / "tasks.jsonl"
    argv = [str(repo), "--output", str(out), "--no-certify", "--no-progress", "--timeout", "0.01",
            "--image-template", f"swe-rl/test-env-{tag}.{{id}}:latest"]  # fmt: skip
    try:
        assert Miner(parse_args(argv)).run()["counts"]["built"] == 0  # no exception out of the worker
        drops = [json.loads(line) for line in out.with_suffix(".drops.jsonl").read_text().splitlines()]
        assert drops[-1]["commit"] == shas[1] and drops[-1]["stage"] == "build"
        assert drops[-1]["reason"] == "the build took more than 0 s"
    finally:
        mine = _images(f"swe-rl/test-env-{tag}.")
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True, check=False)
