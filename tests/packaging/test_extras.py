"""`pip install 'swe-rl[eval]'` is enough for `swe-eval --local-fleet`: the eval extra pulls in the
server extra, whose packages the exec and pool servers import; without them the run says which extra
to install.

The closure of an extra is resolved through the installed packages' own metadata (what pip would
install, offline). The venv tests install the built wheel with --no-deps and see only that closure
(each package of it linked from the machine's site-packages), from outside the checkout.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from tests.conftest import ROOT
from tests.package_copy import copy_package_sources

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SERVER_SIDE = ROOT / "swe_rl" / "fleet"
"""What a local fleet runs: the fleet package (its exec and pool servers); the fakes are never deployed."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extras: list[str], leave_out: str = "") -> list[str]:
    """swe-rl's base dependencies and those of `extras` (less the line `leave_out`), as declared."""
    lines = PROJECT["dependencies"] + [r for e in extras for r in PROJECT["optional-dependencies"][e]]
    return [r for r in lines if r != leave_out]


def closure(lines: list[str]) -> dict[str, metadata.Distribution | None]:
    """The requirement `lines` followed through the installed packages' metadata (what pip would
    install): canonical name -> installed distribution (None when not installed here)."""
    found: dict[str, metadata.Distribution | None] = {}
    todo = [Requirement(r) for r in lines]
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if name == "swe-rl":  # the extras one extra pulls in
            todo += [Requirement(r) for r in requirements(sorted(req.extras))]
            continue
        if name in found:
            continue
        try:
            dist: metadata.Distribution | None = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            dist = None
        found[name] = dist
        for line in (dist.requires or []) if dist else []:
            sub = Requirement(line)
            wanted = sorted(req.extras) or [""]
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(sub)
    return found


def third_party_imports(folder: Path, skip: str) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        if skip in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("swe_rl", "__future__")}


@functools.cache
def _module_owners() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def providers(module: str) -> set[str]:
    return {canonical(d) for d in _module_owners().get(module, [])}


OPTIONAL_SERVER_IMPORTS = {"psycopg": "replicas"}
"""Imported by the pool only when a setting asks for it (pool replicas: `SWE_POOL_DATABASE_URL`), from
its own extra; tests/fleet/pool/test_shared_store.py checks the pool starts without it."""


def test_the_eval_extra_covers_what_the_local_fleet_servers_import():
    imports = third_party_imports(SERVER_SIDE, skip="fakes")
    assert {"flask", "waitress", "docker", "starlette", "uvicorn"} <= imports
    for extras in (["eval"], ["server"]):
        have = closure(requirements(extras))
        uncovered = {m for m in imports if not providers(m) & set(have)} - set(OPTIONAL_SERVER_IMPORTS)
        assert not uncovered, (extras, uncovered)
    for module, extra in OPTIONAL_SERVER_IMPORTS.items():
        assert module in imports and providers(module) & set(closure(requirements([extra]))), (module, extra)


def test_the_local_fleet_checks_the_modules_the_server_extra_declares():
    from swe_rl.fleet.local import SERVER_MODULES

    declared = {canonical(Requirement(r).name) for r in PROJECT["optional-dependencies"]["server"]}
    assert {d for m in SERVER_MODULES for d in providers(m)} == declared


# --- a fresh venv: the wheel plus one extra's closure, nothing else -----------------------------


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("extras-wheel")
    src = copy_package_sources(tmp / "src")
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)],
        tmp,
        clean_env(),
    )
    assert built.returncode == 0, built.stdout + built.stderr
    yield next((tmp / "dist").glob("swe_rl-*.whl"))
    shutil.rmtree(tmp, ignore_errors=True)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}


def venv_with(tmp: Path, wheel: Path, dists: list[metadata.Distribution]) -> Path:
    """A venv (no system site-packages) with the wheel installed --no-deps and `dists` linked in."""
    venv = tmp / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, clean_env())
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    inst = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        tmp,
        clean_env(),
    )
    assert inst.returncode == 0, inst.stdout + inst.stderr
    linked = tmp / "deps"
    linked.mkdir()
    for dist in dists:
        site = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            if top != ".." and (site / top).exists() and not (linked / top).exists():
                (linked / top).symlink_to(site / top)
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, clean_env()
    )
    (Path(purelib.stdout.strip()) / "deps.pth").write_text(f"import site; site.addsitedir({str(linked)!r})\n")
    return venv


def eval_one(venv: Path, tmp: Path) -> subprocess.CompletedProcess:
    """`swe-eval --local-fleet` with gold on one bundled task, run from outside the checkout."""
    work = tmp / "elsewhere"
    work.mkdir(exist_ok=True)
    return run(
        [
            str(venv / "bin" / "swe-eval"),
            "--data",
            str(ROOT / "data" / "fixtures" / "instances.jsonl"),
            "--instance-ids",
            "jpvanhal__inflection-9001",
            "--policy",
            "gold",
            "--local-fleet",
            "--no-progress",
            "--output-dir",
            str(tmp / "run"),
        ],
        work,
        {**clean_env(), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"},
        timeout=900,
    )


def installed_closure(lines: list[str]) -> dict[str, metadata.Distribution | None]:
    have = closure(lines)
    missing = sorted(n for n, d in have.items() if d is None)
    if missing:
        pytest.skip(f"not installed on this machine, so not linkable offline: {missing}")
    return have


@pytest.mark.slow
@pytest.mark.docker
def test_the_wheel_with_the_eval_extra_runs_a_local_fleet_eval(wheel, tmp_path, docker_client, base_image):
    have = installed_closure(requirements(["eval"]))
    venv = venv_with(tmp_path, wheel, [d for d in have.values() if d is not None])
    p = eval_one(venv, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["total"] == summary["resolved"] == 1, summary


@pytest.mark.slow
def test_without_the_server_extra_the_error_names_it(wheel, tmp_path):
    have = installed_closure(requirements(["eval"], leave_out="swe-rl[server]"))
    venv = venv_with(tmp_path, wheel, [d for d in have.values() if d is not None])
    p = eval_one(venv, tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "pip install 'swe-rl[server]'" in p.stderr and "flask" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
