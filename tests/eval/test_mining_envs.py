"""Environments with dependencies (issue 49, item 1): what the tree says (install command, runner), the
date and key an environment is shared under, the scripts that make it, and the refusals (Go modules and
crates no registry here offers), all without Docker. The images themselves: test_mining_envs_docker.py."""

from __future__ import annotations

import json

import pytest

from swe_rl.eval.mining.build import TaskEnv, _dockerfile
from swe_rl.eval.mining.cli import Miner, parse_args
from swe_rl.eval.mining.env_detect import dependency_files, node_runner, python_install
from swe_rl.eval.mining.envs import EnvUnavailable, env_date, plan_env
from swe_rl.eval.mining.history import split_commit
from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.eval.mining.recipes import Recipe, detect_recipe
from tests.eval.mining_repos import make_history

pytest.importorskip("tomllib")


SETUP_PY = "from setuptools import setup\nsetup(name='p', extras_require={'testing': ['mock']})\n"
TOX = "[tox]\nenvlist = py311\n\n[testenv]\ndeps =\n    -r{toxinidir}/req-extra.txt\n    hypothesis  # prop\n    {py311}: x\n"


def test_the_python_install_command_is_read_from_the_tree(tmp_path):
    (a,) = make_history(
        tmp_path / "a", [("2024-01-01T00:00:00+00:00", {"setup.py": SETUP_PY, "tox.ini": TOX})]
    )
    # setup.py's "testing" extra; no requirement files, so tox.ini's deps (its -r kept, a factor line not)
    assert python_install(tmp_path / "a", a) == (
        "uv pip install --exclude-newer-package setuptools=2025-01-01T00:00:00Z -e '.[testing]' -r req-extra.txt hypothesis pytest"
    )
    files = {"requirements.txt": "six\n", "requirements/tests.txt": "pytest==7.0\n",
             "requirements/dev.txt": "-r tests.txt\nsphinx\n", "tox.ini": TOX}  # fmt: skip
    (b,) = make_history(tmp_path / "b", [("2024-01-01T00:00:00+00:00", files)])
    # not installable (no setup.py, no pyproject): the runtime and test requirements only, tox.ini unread
    assert python_install(tmp_path / "b", b) == (
        "uv pip install -r requirements.txt -r requirements/tests.txt pytest"
    )
    assert dependency_files(tmp_path / "b", b, "python") == [
        "requirements.txt", "requirements/dev.txt", "requirements/tests.txt", "tox.ini"
    ]  # fmt: skip
    groups = '[project]\nname = "g"\n\n[dependency-groups]\ndocs = ["sphinx"]\ntests = ["pytest-xdist"]\n'
    (g,) = make_history(tmp_path / "g", [("2024-01-01T00:00:00+00:00", {"pyproject.toml": groups})])
    assert (
        python_install(tmp_path / "g", g)
        == "uv pip install --exclude-newer-package setuptools=2025-01-01T00:00:00Z -e . --group tests pytest"
    )
    (c,) = make_history(tmp_path / "c", [("2024-01-01T00:00:00+00:00", {"pyproject.toml": "[tool.black]\n"})])
    assert python_install(tmp_path / "c", c) == "uv pip install pytest"  # a tool's file only


def test_the_node_runner_is_read_from_the_dev_dependencies(tmp_path):
    package = {"name": "p", "devDependencies": {"mocha": "^5", "jest": "^22"}}
    (a,) = make_history(
        tmp_path / "a", [("2024-01-01T00:00:00+00:00", {"package.json": json.dumps(package)})]
    )
    assert node_runner(tmp_path / "a", a) == ("npx jest --ci --verbose {tests}", "parse_log_jest")
    recipe = detect_recipe(tmp_path / "a", a, "javascript")
    assert recipe.language(LANGUAGES["javascript"]).command_for(["test/a.test.js"]) == (
        "npx jest --ci --verbose test/a.test.js"
    )
    (b,) = make_history(tmp_path / "b", [("2024-01-01T00:00:00+00:00", {"package.json": "{}"})])
    assert node_runner(tmp_path / "b", b) is None  # node's own runner (the language's default)


def test_consecutive_commits_share_an_environment_until_their_dependencies_or_month_change(tmp_path):
    repo = tmp_path / "r"
    shas = make_history(
        repo,
        [
            ("2021-03-04T05:06:07+00:00", {"setup.py": SETUP_PY, "p.py": "x = 1\n"}),
            ("2021-03-20T00:00:00+00:00", {"p.py": "x = 2\n"}),  # code only: same environment
            ("2021-03-25T00:00:00+00:00", {"setup.py": SETUP_PY + "# dep change\n"}),
            ("2021-04-02T00:00:00+00:00", {"p.py": "x = 3\n"}),  # next month
        ],
    )
    plans = [plan_env(repo, sha, "python", Recipe(), "Own/Repo") for sha in shas]
    assert all(p is not None for p in plans)
    dates = [p.date for p in plans if p]
    # the later of the month's first day and a day after the last change of the dependency files
    assert dates == [
        "2021-03-05T05:06:07Z",
        "2021-03-05T05:06:07Z",
        "2021-03-26T00:00:00Z",
        "2021-04-01T00:00:00Z",
    ]
    images = [p.image for p in plans if p]
    assert images[0] == images[1] and len(set(images)) == 3
    assert images[0].startswith("swe-rl/env.own__repo:")
    first = plans[0]
    assert first is not None and "export UV_EXCLUDE_NEWER=2021-03-05T05:06:07Z" in first.script
    assert (
        "uv pip install --exclude-newer-package setuptools=2025-01-01T00:00:00Z -e '.[testing]' pytest"
        in first.script
        and "rm -rf /testbed" in first.script
    )
    assert "pip install" in first.task_setup and "--no-index" in first.task_setup  # offline refresh
    # a recipe's install and dependencies replace and extend the detected command; no date when asked
    own = plan_env(
        repo,
        shas[0],
        "python",
        Recipe(install="uv pip install .", dependencies=["a<2"], exclude_newer=False),
        "o/r",
    )
    assert own is not None and own.date == "" and "uv pip install . 'a<2'" in own.script
    assert "UV_EXCLUDE_NEWER" not in own.script and own.task_setup == ""
    assert env_date(repo, shas[3], []) == "2021-04-01T00:00:00Z"


def test_node_environments_keep_node_modules_and_install_before_the_date(tmp_path):
    repo = tmp_path / "r"
    (sha,) = make_history(
        repo, [("2022-07-09T10:00:00+00:00", {"package.json": '{"name": "p"}', "index.js": ""})]
    )
    plan = plan_env(repo, sha, "javascript", Recipe(setup="npm run build"), "o/r")
    assert plan is not None and "npm_config_before=2022-07-10T10:00:00Z" in plan.script
    assert plan.script.index("npm install") < plan.script.index("npm run build")
    assert "! -name node_modules" in plan.script  # the tree goes, node_modules stays
    # the task layer on top: node_modules and install litter kept out of the base commit
    text = _dockerfile(LANGUAGES["javascript"], "o__r-1", TaskEnv(plan.image, "refresh"))
    assert (
        text.startswith(f"FROM {plan.image}\n") and "node_modules/" in text and "RUN set -eu; refresh" in text
    )
    plain = _dockerfile(LANGUAGES["javascript"], "o__r-1")
    assert plain.startswith("FROM swe-rl/toolchain-node:bookworm") and "exclude" not in plain


GO_MOD = "module example.com/m\n\ngo 1.19\n\nrequire (\n\tgithub.com/a/b v1.2.0 // indirect\n\tgolang.org/x/c v0.1.0\n)\n"


def test_go_modules_are_refused_and_crates_come_from_debians_registry(tmp_path):
    (go,) = make_history(
        tmp_path / "go", [("2024-01-01T00:00:00+00:00", {"go.mod": GO_MOD, "m.go": "package m\n"})]
    )
    with pytest.raises(
        EnvUnavailable, match=r"needs Go modules github.com/a/b, golang.org/x/c: no module proxy"
    ):
        plan_env(tmp_path / "go", go, "go", Recipe(), "o/go")
    (free,) = make_history(
        tmp_path / "f", [("2024-01-01T00:00:00+00:00", {"go.mod": "module m\n\ngo 1.19\n"})]
    )
    assert plan_env(tmp_path / "f", free, "go", Recipe(), "o/f") is None  # the toolchain image is enough
    cargo = (
        '[package]\nname = "c"\n\n[workspace]\nmembers = ["crates/*"]\n\n[dependencies]\n'
        'serde = { version = "1", features = ["derive"] }\nlocal = { path = "local" }\n\n'
        "[target.'cfg(unix)'.dev-dependencies]\nrand_core = \"0.6\"\n"
    )
    files = {"Cargo.toml": cargo, "crates/x/Cargo.toml": '[dependencies]\nitoa = "1"\n',
             "fuzz/Cargo.toml": '[dependencies]\nlibfuzzer-sys = "0.4"\n'}  # fmt: skip
    (rs,) = make_history(tmp_path / "rs", [("2024-01-01T00:00:00+00:00", files)])
    plan = plan_env(tmp_path / "rs", rs, "rust", Recipe(), "o/rs")
    assert plan is not None and plan.date == ""  # Debian offers one version: no date to resolve at
    # the root's and the members' crates, a feature's own package; not the path crate, not fuzz/'s
    packages = "librust-itoa-dev librust-rand-core-dev librust-serde-dev librust-serde+derive-dev"
    assert f"for p in {packages}; do" in plan.script and "libfuzzer" not in plan.script
    assert 'directory = "/usr/share/cargo/registry"' in plan.script
    assert "cargo generate-lockfile --offline" in plan.script and "--locked" in plan.script
    (none,) = make_history(
        tmp_path / "n", [("2024-01-01T00:00:00+00:00", {"Cargo.toml": '[package]\nname = "n"\n'})]
    )
    assert plan_env(tmp_path / "n", none, "rust", Recipe(), "o/n") is None


def test_the_miner_drops_a_candidate_whose_environment_cannot_be_had(tmp_path):
    repo = tmp_path / "go"
    shas = make_history(
        repo,
        [
            (
                "2024-01-01T00:00:00+00:00",
                {"go.mod": GO_MOD, "m.go": "package m\n", "m_test.go": "package m\n"},
            ),
            (
                "2024-01-02T00:00:00+00:00",
                {"m.go": "package m\n\nvar X = 1\n", "m_test.go": "package m\n// t\n"},
            ),
        ],
    )
    out = tmp_path / "o" / "tasks.jsonl"
    out.parent.mkdir()
    miner = Miner(parse_args([str(repo), "--output", str(out), "--with-deps"]))
    cand = split_commit(repo, shas[1], LANGUAGES["go"])
    assert not isinstance(cand, type(None)) and hasattr(cand, "gold_patch")
    assert miner.build_and_validate(cand, LANGUAGES["go"], "o__go-1", []) == "dropped"  # type: ignore[arg-type]
    (drop,) = [json.loads(line) for line in out.with_suffix(".drops.jsonl").read_text().splitlines()]
    assert drop["stage"] == "env" and "needs Go modules github.com/a/b" in drop["reason"]
    # without --with-deps nothing changes: no environment is planned
    assert Miner(parse_args([str(repo), "--output", str(out)])).envs is None


FAKE_NPM = """#!/bin/bash
# npm as the registry answers it: a lock file pinning gone@1.3.0 cannot be installed; package.json's
# ranges can; a tree asking net@ fails for another reason (the network)
if grep -q net package.json; then echo "npm ERR! code ENOTFOUND" >&2; exit 1; fi
if grep -q lost package.json; then echo "npm ERR! notarget No matching version found for lost@^2.0.0." >&2; fi
if grep -q lost package.json; then printf 'npm ERR! A complete log of this run can be found in:\nnpm ERR!   /root/.npm/_logs/x.log\n' >&2; exit 1; fi
if [ -e yarn.lock ] || [ -e package-lock.json ]; then
  echo "npm ERR! code ETARGET" >&2; echo "npm ERR! notarget No matching version found for gone@1.3.0." >&2; exit 1
fi
mkdir -p node_modules/gone && echo '{"version": "1.4.0"}' > node_modules/gone/package.json
"""


@pytest.mark.parametrize(
    "files, ok, note",
    [
        ({"package.json": '{"devDependencies": {"gone": "^1.3.0"}}', "yarn.lock": "gone@1.3.0"}, True, True),
        ({"package.json": '{"devDependencies": {"gone": "^1.3.0"}}'}, True, False),  # no lock: as it was
        ({"package.json": '{"devDependencies": {"net": "^1"}}', "yarn.lock": ""}, False, False),  # not gone
        ({"package.json": '{"devDependencies": {"lost": "^2"}}'}, False, False),  # gone, and no lock file
    ],
)
def test_a_lock_file_naming_releases_the_registry_lost_is_set_aside_with_the_reason(
    tmp_path, files, ok, note
):
    import os
    import subprocess

    from swe_rl.eval.mining.envs import NOTES, NPM_INSTALL

    bin_dir, tree, notes = tmp_path / "bin", tmp_path / "testbed", tmp_path / "notes"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(FAKE_NPM)
    (bin_dir / "npm").chmod(0o755)
    tree.mkdir()
    for name, text in files.items():
        (tree / name).write_text(text)
    script = NPM_INSTALL.replace(NOTES, str(notes)).replace("/tmp/swe-rl-npm.log", str(tmp_path / "npm.log"))
    proc = subprocess.run(["bash", "-c", "set -eux; " + script], cwd=tree, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, check=False)  # fmt: skip
    assert (proc.returncode == 0) == ok, proc.stderr
    assert (tree / "node_modules" / "gone").is_dir() == ok
    assert notes.exists() == note
    if note:
        text = notes.read_text()
        assert "No matching version found for gone@1.3.0" in text and "resolved as of the date" in text
        assert not (tree / "yarn.lock").exists()
    if not ok:
        # the last lines (what the drop's reason keeps) say why, not the shell's trace
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        assert ("ENOTFOUND" in tail or "lost@^2.0.0" in tail) and ".npm/_logs/x.log" not in tail, proc.stderr
