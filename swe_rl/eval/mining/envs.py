"""Environment images: a repository's dependencies installed as they were on the commit's date.

An environment image is the language's toolchain plus what the project installs (Python: a venv at
`VENV` with the project's dependencies from the package index, ``uv pip install`` with
``UV_EXCLUDE_NEWER``; JavaScript: ``node_modules`` in ``/testbed`` from ``npm install`` with
``npm_config_before``). It is the only step with network: a container of the toolchain image runs
the install with the parent commit's tree copied in, then is committed as the image (``docker
commit``; the tree is removed first, ``node_modules`` kept). The host's CA bundle is mounted for
that run only (``SWE_MINE_CA_BUNDLE``, default the system one: a proxy that re-signs TLS is then
trusted), never stored in the image. Task images are thin offline layers on top (build.py).

Consecutive commits share one environment: its key hashes the recipe and the contents of the
dependency files (env_detect.py) and its date, which is the later of the first day of the parent
commit's month and one day after the last change of those files: every commit of a month whose dependency files
are the same gets the same image, resolved as of a date no later than its own.

Go and Rust: the module proxy and the crate registry are not reachable here. A Go module or crate
with no dependency needs no environment (the toolchain image). A crate's dependencies come from
Debian's ``librust-*-dev`` packages, a directory registry cargo is pointed at (source replacement);
the environment fails, with cargo's reason, when they do not satisfy the manifest or its
``Cargo.lock``. A Go module with requirements is refused with `EnvUnavailable` (Debian's
``golang-*-dev`` sources are GOPATH trees, not a module cache). Either way the candidate is dropped
with the reason (docs/datasets.md, "Environments").
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shlex
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from swe_rl.eval.mining.build import TaskEnv, export_tree
from swe_rl.eval.mining.env_detect import dependency_files, python_install, toml_or_empty
from swe_rl.eval.mining.history import git
from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.eval.mining.recipes import Recipe

__all__ = [
    "ENV_LABEL",
    "EnvFailed",
    "EnvPlan",
    "EnvUnavailable",
    "EnvironmentMaker",
    "build_env",
    "env_date",
    "plan_env",
]

ENV_LABEL = "swe-rl.mined.env"
"""Label on every environment image and its build container (value: the environment's key)."""
VENV = "/opt/swe-rl-venv"
UV_VERSION = "0.13.9"
CA_BUNDLE_ENV = "SWE_MINE_CA_BUNDLE"
_CA = "/run/swe-rl/ca.crt"
_SRC = "/run/swe-rl/src"
PATH = "/opt/swe-rl-venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

TOOLCHAINS: dict[str, tuple[str, str, str]] = {
    # language -> (image, built FROM, shell run with network to make it)
    "python": (
        "swe-rl/env-toolchain-python:bookworm", "swe-rl/base:bookworm",
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "python3-venv python3-pip >/dev/null && python3 -m venv /opt/swe-rl-uv && "
        f"/opt/swe-rl-uv/bin/pip install -q uv=={UV_VERSION} && ln -s /opt/swe-rl-uv/bin/uv /usr/local/bin/uv && "
        "apt-get clean && rm -rf /var/lib/apt/lists/*",
    ),
    "javascript": (
        "swe-rl/env-toolchain-node:bookworm", "swe-rl/toolchain-node:bookworm",
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "npm >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*",
    ),
}  # fmt: skip


NOTES = "/etc/swe-rl-env-notes"
"""A file of the environment image saying where its install departed from the tree's files, and why."""
_NPM = "npm install --no-audit --no-fund --ignore-scripts"
_GONE = "ETARGET|E404|No matching version found|is not in this registry"
NPM_INSTALL = (
    f"if ! {_NPM} >/tmp/swe-rl-npm.log 2>&1; then "
    f"if grep -qE '{_GONE}' /tmp/swe-rl-npm.log && "
    "{ [ -e package-lock.json ] || [ -e npm-shrinkwrap.json ] || [ -e yarn.lock ]; }; then "
    'echo "the lock file names a release the registry no longer has ($({ grep -m1 -oE '
    "'(No matching version found|is not in this registry).*' /tmp/swe-rl-npm.log || grep -m1 -oE "
    "'(ETARGET|E404).*' /tmp/swe-rl-npm.log; } | cut -c1-160)): it is ignored and package.json resolved "
    'as of the date" '
    f"| tee -a {NOTES} >&2; rm -rf node_modules package-lock.json npm-shrinkwrap.json yarn.lock; {_NPM}; "
    "else grep -v -e 'A complete log' -e '/_logs/' /tmp/swe-rl-npm.log | tail -n 20 >&2; exit 1; fi; fi"
)
"""The default JavaScript install: ``npm install`` of the tree's files (the lock file wins where there
is one); when it fails because the lock file pins a release the registry no longer has (unpublished,
or a scope republished since), the lock files are set aside and ``package.json``'s ranges are
resolved as of the date instead, with the reason written to `NOTES` in the image. Any other failure
stays a failure (the environment's candidates are dropped with the log's tail)."""


class EnvUnavailable(RuntimeError):
    """The repository needs what the registries this machine reaches do not offer."""


class EnvFailed(RuntimeError):
    """The environment's install failed; the message ends with the tail of its log."""


@dataclass(frozen=True)
class EnvPlan:
    """One environment image: what it is built from, how, and as of when."""

    language: str
    image: str
    key: str
    date: str
    """The ``--exclude-newer`` / ``--before`` date (UTC, ISO 8601)."""
    script: str
    """Run in a container of the toolchain image with the parent's tree at ``/testbed``."""
    task_setup: str = ""
    """Run (offline) in the task image after its commit: refresh the editable install."""


def env_date(repo: Path, commit: str, files: list[str]) -> str:
    """The later of the first day of ``commit``'s month (UTC) and a day after the last change of ``files``."""
    when = datetime.fromisoformat(git(repo, "show", "-s", "--format=%cI", commit).strip()).astimezone(
        timezone.utc
    )
    date = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if files:
        last = git(repo, "log", "-1", "--format=%cI", commit, "--", *files).strip()
        if last:  # a day's grace: a maintainer pins the release they published minutes later
            date = max(date, datetime.fromisoformat(last).astimezone(timezone.utc) + timedelta(days=1))
    return date.strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(repo: Path, commit: str, files: list[str], *parts: str) -> str:
    blobs = git(repo, "ls-tree", commit, "--", *files) if files else ""
    return hashlib.sha256("\0".join([blobs, *parts]).encode()).hexdigest()[:16]


def _slug(repo_name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in repo_name.lower().replace("/", "__"))


def plan_env(repo: Path, commit: str, language: str, recipe: Recipe, repo_name: str) -> EnvPlan | None:
    """The environment of ``commit``'s tree; None when the toolchain image is all it needs."""
    files = dependency_files(repo, commit, language)
    if language == "go":
        needs = _go_requires(repo, commit)
        if needs:
            raise EnvUnavailable(
                f"needs Go modules {', '.join(needs[:5])}{' ...' if len(needs) > 5 else ''}: no module "
                "proxy is reachable here and Debian's golang-*-dev packages are not wired in "
                "(docs/datasets.md, 'Environments')"
            )
        return None
    if language == "rust":
        crates = _crate_deps(repo, commit, files)
        if not crates:
            return None  # the toolchain image is enough
        script = "set -eux; " + "; ".join(
            [_DEBIAN_CRATES.format(packages=" ".join(debian_crate_packages(crates))),
             f"mkdir -p /testbed && cp -a {_SRC}/. /testbed/ && cd /testbed",
             # a tracked Cargo.lock must be satisfiable as it is; else cargo picks Debian's versions
             "if git ls-files --error-unmatch Cargo.lock >/dev/null 2>&1 || [ -f Cargo.lock ]; then "
             "cargo metadata --offline --locked --format-version 1 >/dev/null; "
             "else cargo generate-lockfile --offline; fi",
             "cd / && rm -rf /testbed"]
        )  # fmt: skip
        key = _key(repo, commit, files, language, script)
        return EnvPlan(language, f"swe-rl/env.{_slug(repo_name)}:{key}", key, "", script)
    if language not in TOOLCHAINS:
        return None
    date = env_date(repo, commit, files) if recipe.exclude_newer else ""
    if language == "python":
        install = recipe.install or python_install(repo, commit)
        if recipe.dependencies:
            install += " " + " ".join(shlex.quote(d) for d in recipe.dependencies)
        body = [f"python3 -m venv {VENV}", install]
        done = "cd / && rm -rf /testbed"
        refresh = f"{VENV}/bin/python -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true"
        task_setup = refresh if " -e " in f" {install} " else ""
    else:
        body = [recipe.install or NPM_INSTALL]
        done = "find /testbed -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +"
        task_setup = ""
    if recipe.setup:
        body.append(recipe.setup)
    env = [f"export VIRTUAL_ENV={VENV} PATH={PATH}"]
    if date:
        env.append(f"export UV_EXCLUDE_NEWER={date} npm_config_before={date}")
    script = "set -eux; " + "; ".join(
        [*env, f"mkdir -p /testbed && cp -a {_SRC}/. /testbed/ && cd /testbed", *body, done]
    )
    key = _key(repo, commit, files, language, script)
    return EnvPlan(language, f"swe-rl/env.{_slug(repo_name)}:{key}", key, date, script, task_setup)


def _go_requires(repo: Path, commit: str) -> list[str]:
    text = git(repo, "show", f"{commit}:go.mod", check=False)
    mods, block = [], False
    for line in text.splitlines():
        line = line.split("//", 1)[0].strip()
        if line.startswith("require ("):
            block = True
        elif block and line == ")":
            block = False
        elif block and line or line.startswith("require "):
            mods.append(line.removeprefix("require ").split()[0])
    return mods


_DEBIAN_CRATES = (
    "apt-get update -qq; for p in {packages}; do DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
    '--no-install-recommends $p >/dev/null 2>&1 || {{ echo "Debian offers no $p" >&2; exit 1; }}; done; '
    "apt-get clean; rm -rf /var/lib/apt/lists/*; mkdir -p /root/.cargo; "
    'printf \'[source.crates-io]\\nreplace-with = "debian"\\n[source.debian]\\ndirectory = '
    '"/usr/share/cargo/registry"\\n\' > /root/.cargo/config.toml'
)
"""Debian's crates installed (one ``librust-<crate>[+<feature>]-dev`` package each) and cargo pointed
at their directory registry instead of the crate registry."""


def debian_crate_packages(crates: list[str]) -> list[str]:
    """``serde`` → ``librust-serde-dev``, ``serde+derive`` (a feature) → ``librust-serde+derive-dev``."""
    return [f"librust-{c.lower().replace('_', '-')}-dev" for c in crates]


def _crate_deps(repo: Path, commit: str, files: list[str]) -> list[str]:
    """The crates (and ``crate+feature`` for the features asked) the workspace's manifests depend on."""
    names: list[str] = []
    root = toml_or_empty(git(repo, "show", f"{commit}:Cargo.toml", check=False))
    members = [m for m in root.get("workspace", {}).get("members", []) if isinstance(m, str)]
    wanted = {"Cargo.toml"} | {
        p for p in files for m in members if fnmatch.fnmatch(p, f"{m.rstrip('/')}/Cargo.toml")
    }  # the root and the workspace's members: not a fuzz/ or example crate of its own
    for path in sorted(wanted & set(files)):
        data = toml_or_empty(git(repo, "show", f"{commit}:{path}", check=False))
        tables = [data, *(t for t in data.get("target", {}).values() if isinstance(t, dict))]
        for table in (
            t.get(k, {}) for t in tables for k in ("dependencies", "dev-dependencies", "build-dependencies")
        ):
            for name, spec in table.items():
                if isinstance(spec, dict) and "path" in spec:
                    continue  # a crate of the same repository
                crate = spec.get("package", name) if isinstance(spec, dict) else name
                names.append(crate)
                if isinstance(spec, dict):
                    names += [f"{crate}+{f}" for f in spec.get("features", []) if isinstance(f, str)]
    return sorted(set(names))


def _docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def image_exists(image: str) -> bool:
    return _docker("image", "inspect", image).returncode == 0


def _ca_bundle() -> str | None:
    path = os.environ.get(CA_BUNDLE_ENV, "/etc/ssl/certs/ca-certificates.crt")
    return path if path and Path(path).is_file() else None


def run_and_commit(
    from_image: str,
    script: str,
    image: str,
    key: str,
    *,
    source: Path | None = None,
    env: tuple[str, ...] = (),
    timeout: float = 1800,
) -> None:
    """Run ``script`` in a container of ``from_image`` (default network, the CA bundle and ``source``
    mounted read-only), then commit it as ``image`` (``env``: its ``ENV`` lines); the container is removed whatever happens."""
    name = f"swe-rl-env-{uuid.uuid4().hex[:10]}"
    ca = _ca_bundle()
    cmd = ["run", "--name", name, "--label", f"{ENV_LABEL}={key}"]
    if ca:
        cmd += ["-v", f"{ca}:{_CA}:ro"]
        script = f"export SSL_CERT_FILE={_CA} PIP_CERT={_CA} npm_config_cafile={_CA}; {script}"
    if source is not None:
        cmd += ["-v", f"{source}:{_SRC}:ro"]
    try:
        proc = _docker(*cmd, from_image, "bash", "-c", script, timeout=timeout)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr + proc.stdout).strip().splitlines()[-6:])
            raise EnvFailed(f"environment {image}: the install failed: {tail[-600:]}")
        changes = [
            f"LABEL {ENV_LABEL}={key}",
            f"ENV PATH={PATH}",
            'CMD ["/bin/bash"]',
            *(f"ENV {e}" for e in env),
        ]
        proc = _docker("commit", *(a for c in changes for a in ("--change", c)), name, image)
        if proc.returncode != 0:
            raise EnvFailed(f"environment {image}: docker commit failed: {proc.stderr.strip()[:300]}")
    except subprocess.TimeoutExpired as exc:
        raise EnvFailed(f"environment {image}: the install took more than {timeout:.0f} s") from exc
    finally:
        _docker("rm", "-f", name)


def toolchain(language: str, *, timeout: float = 1800) -> str:
    """The language's environment toolchain image, made once (Debian's packages; uv from the index)."""
    if language not in TOOLCHAINS:
        return LANGUAGES[language].image  # Rust: the toolchain image (data/build_multilang_images.sh)
    image, base, script = TOOLCHAINS[language]
    if not image_exists(image):
        run_and_commit(base, "set -eu; " + script, image, f"toolchain-{language}", timeout=timeout)
    return image


def build_env(plan: EnvPlan, source: Path, *, timeout: float = 1800) -> str:
    """Build ``plan``'s image (kept when it exists) from the tree at ``source``; returns the image."""
    if not image_exists(plan.image):
        env = (f"VIRTUAL_ENV={VENV}",) if plan.language == "python" else ()
        run_and_commit(toolchain(plan.language, timeout=timeout), plan.script, plan.image, plan.key,
                       source=source, env=env, timeout=timeout)  # fmt: skip
    return plan.image


class EnvironmentMaker:
    """The miner's environments: each planned, built once (one build per key at a time, across the
    miner's workers) and a failure remembered for the run, so consecutive commits share both."""

    def __init__(self, repo: Path, repo_name: str, *, timeout: float = 1800) -> None:
        self.repo, self.repo_name, self.timeout = repo, repo_name, timeout
        self.lock = threading.Lock()
        self.key_locks: dict[str, threading.Lock] = {}
        self.failed: dict[str, str] = {}

    def task_env(self, commit: str, language: str, recipe: Recipe) -> TaskEnv | None:
        """The environment a task image of ``commit``'s tree is built on; None: the toolchain image.
        Raises `EnvUnavailable` or `EnvFailed` (the same message for every commit of a failed key)."""
        plan = plan_env(self.repo, commit, language, recipe, self.repo_name)
        if plan is None:
            return None
        with self.lock:
            key_lock = self.key_locks.setdefault(plan.key, threading.Lock())
        with key_lock:
            if plan.key in self.failed:
                raise EnvFailed(self.failed[plan.key])
            if not image_exists(plan.image):
                with tempfile.TemporaryDirectory(prefix="swe-rl-env-") as tmp:
                    export_tree(self.repo, commit, Path(tmp) / "src")
                    try:
                        build_env(plan, Path(tmp) / "src", timeout=self.timeout)
                    except EnvFailed as exc:
                        self.failed[plan.key] = str(exc)
                        raise
        return TaskEnv(plan.image, plan.task_setup)
