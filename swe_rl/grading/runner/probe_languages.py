"""The runner's effective configuration in Go, JavaScript and Rust, asked of the toolchain (stage 4a).

`swe_rl.grading.runner.probe` asks pytest through a plugin; ``go test``, ``node --test`` / npm and
``cargo test`` have no plugin hook, but their own tools answer what a parser of their files would guess:

- **Go**: ``go env -json`` (``GOFLAGS``, ``GOEXPERIMENT``, ``CGO_ENABLED``, ``GOWORK``... as the go command
  resolves them from the environment, ``GOENV`` and workspace files), ``go mod edit -json`` (the ``go``,
  ``toolchain``, ``replace``, ``exclude`` and ``godebug`` directives as go parses them) and ``go list -e``
  of ``./...`` (per package: the files the build constraints keep, ignore, test, and the cgo files);
- **JavaScript**: a grader-owned node script reads the root ``package.json`` (``scripts`` with their
  ``pre``/``post`` lifecycle scripts, ``type``, ``imports``, ``exports``, ``main``), every ``.npmrc``
  npm reads (``node-options`` preloads), ``NODE_OPTIONS``, and resolves, from each test file of the test
  patch, every module it requires or imports the way node does (``createRequire``: ``imports`` maps,
  ``node_modules``, a file without a suffix); ``npm config list --json`` where npm is installed;
- **Rust**: ``cargo metadata --no-deps --offline`` (targets: ``custom-build`` for ``build.rs``, tests,
  libraries, with their source paths), ``Cargo.toml`` as TOML (``[profile.*]``, ``[[test]]`` with
  ``harness``, ``build``, ``[patch]``/``[replace]``), every ``.cargo/config``/``config.toml`` cargo reads
  (the repository and its ancestors, ``CARGO_HOME``: ``[target.*].runner``, ``[build] rustflags``,
  ``[env]``, ``[alias]``, ``[profile]``), ``rust-toolchain`` files and the ``CARGO_*``/``RUST*`` environment.

The test run also carries the runner's own check (`runner.machinery`: node's preload, cargo's runner,
Go's check in the canary file), set up right after the probe; its report lands in ``guard_path``.

None of these runs the repository's code (no build, no test, no package script), so the probe runs in
the test run's own exec, right before the test command and before anything of the agent's runs: its
answers are written to a file of a random name and their SHA-256 printed in the log; the log line came
before the code under test could run, so a file rewritten afterwards no longer matches. The clean tree
(test patch applied, no agent patch) runs the same probe in an exec of its own, without the tests. A
difference the test patch does not explain (it is applied on both trees) voids the reward (rule
``runner_probe``, as pytest's probe); a patched run without a matching report voids; a clean tree
without one is recorded (``noted``), never voided.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import random
import shlex
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from swe_rl.grading.integrity import TamperRecord, patch_paths
from swe_rl.grading.languages import go_command_env, language_of, test_command
from swe_rl.grading.runner.machinery import guard_lines
from swe_rl.grading.scans.runner_config import load_toml
from swe_rl.tasks import TaskInstance
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

__all__ = [
    "LanguageProbePlan",
    "LanguageProbeReport",
    "compare_language_probes",
    "language_probe_records",
    "plan_language_probe",
    "read_language_probe",
]

PROBE_MARK = ">>>>> swe-rl runner probe"
"""The log line's head: ``PROBE_MARK <tag> <sha256 of the report file>``."""
MAX_REPORT = 1 << 20
"""Bytes of probe output kept (a difference past them is not seen; both trees are cut alike)."""

_GO_LIST = (
    '{{.ImportPath}}{{"\\t"}}{{join .GoFiles " "}}{{"\\t"}}{{join .IgnoredGoFiles " "}}{{"\\t"}}'
    '{{join .TestGoFiles " "}}{{"\\t"}}{{join .XTestGoFiles " "}}{{"\\t"}}{{join .CgoFiles " "}}'
)
_GO = f"""echo '### go env'; {{env}}go env -json
echo '### go mod'; {{env}}go mod edit -json
echo '### go list'; {{env}}go list -e -f {shlex.quote(_GO_LIST)} ./..."""
"""`{env}`: the test command's own assignments (`languages.go_command_env`: GOPATH mode's GO111MODULE=off),
so the toolchain answers for the packages as the tests build them."""

_NODE_SCRIPT = r"""'use strict';
const fs = require('fs'), path = require('path'), os = require('os'), { createRequire } = require('module');
const root = process.cwd();
const show = (name, value) => process.stdout.write('### ' + name + '\n' + JSON.stringify(value) + '\n');
const read = (p) => { try { return fs.readFileSync(p, 'utf8'); } catch (e) { return null; } };
const json = (p) => { const t = read(p); if (t === null) return null; try { return JSON.parse(t); } catch (e) { return '<unparsable>'; } };
const pick = (o) => (o && typeof o === 'object')
  ? { scripts: o.scripts ?? null, type: o.type ?? null, imports: o.imports ?? null, exports: o.exports ?? null, main: o.main ?? null }
  : o;
show('package.json', pick(json(path.join(root, 'package.json'))));
const prefix = path.dirname(path.dirname(process.execPath));
for (const f of [path.join(root, '.npmrc'), path.join(os.homedir(), '.npmrc'), '/etc/npmrc', path.join(prefix, 'etc', 'npmrc')]) {
  show('npmrc ' + f, read(f));
}
show('env', { NODE_OPTIONS: process.env.NODE_OPTIONS ?? null, NODE_PATH: process.env.NODE_PATH ?? null });
const spec = /\brequire\s*\(\s*(['"`])([^'"`\n]+)\1|\bfrom\s*(['"])([^'"\n]+)\3|\bimport\s*\(?\s*(['"])([^'"\n]+)\5/g;
for (const rel of process.argv.slice(2)) {
  const file = path.resolve(root, rel);
  const out = {};
  let dir = path.dirname(file);
  for (;;) {
    const p = path.join(dir, 'package.json');
    if (fs.existsSync(p)) { const j = json(p); out['<package.json>'] = path.relative(root, p); out['<type>'] = (j && j.type) || null; out['<imports>'] = (j && j.imports) || null; break; }
    const up = path.dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  const text = read(file);
  if (text !== null) {
    const req = createRequire(file);
    for (const m of text.matchAll(spec)) {
      const s = m[2] || m[4] || m[6];
      try { out[s] = req.resolve(s); } catch (e) { out[s] = 'error ' + (e.code || e.name); }
    }
  }
  show('resolve ' + rel, out);
}
"""

_RUST = """echo '### cargo metadata'; cargo metadata --no-deps --offline --format-version 1
echo '### Cargo.toml'; cat Cargo.toml
__swe_d=$PWD; while :; do for __swe_f in "$__swe_d/.cargo/config" "$__swe_d/.cargo/config.toml"; do
  if [ -f "$__swe_f" ]; then echo "### cargo config $__swe_f"; cat "$__swe_f"; fi; done
  [ "$__swe_d" = / ] && break; __swe_d=$(dirname "$__swe_d"); done
for __swe_f in "${CARGO_HOME:-$HOME/.cargo}/config" "${CARGO_HOME:-$HOME/.cargo}/config.toml" rust-toolchain rust-toolchain.toml; do
  if [ -f "$__swe_f" ]; then echo "### file $__swe_f"; cat "$__swe_f"; fi; done
echo '### env'; env | grep -E '^(CARGO|RUST)' | sort"""

_JS_SUFFIXES = (".js", ".cjs", ".mjs", ".jsx", ".ts", ".cts", ".mts", ".tsx")


class LanguageProbePlan(BaseModel):
    """The probe of one grading: the two scripts and where their reports land."""

    language: str = ""
    clean_script: str = ""
    """The eval script with the probe and no test run (the clean tree's exec)."""
    run_script: str = ""
    """The eval script with the probe right before the test command (the patched tree's test run)."""
    tag: str = ""
    """Random per grading: names the log line and the report files."""
    clean_path: str = ""
    run_path: str = ""
    guard_path: str = ""
    """Where the runner's own check (`runner.machinery`) writes its report in the test run (Go: the
    canary file's check, planted with this path)."""
    skipped: str = ""
    """Why no probe runs ("" when it does)."""


class LanguageProbeReport(BaseModel):
    """What the toolchain answered, one text per section (``go env``, ``resolve test/x.test.js``...)."""

    sections: dict[str, str] = Field(default_factory=dict)
    error: str = ""
    """Why there is no valid report ("" when there is): no log line, no file, a file that does not match."""


def _probe_lines(
    language: str, tag: str, path: str, test_files: list[str], then: list[str] | None = None, env: str = ""
) -> list[str]:
    """Shell lines that run the probe with tracing off and print its report's hash (`then`: lines run
    after it, tracing still off; `env`: Go's assignments of the test command)."""
    folder = posixpath.dirname(path)
    if language == "go":
        body = _GO.replace("{env}", env)
        setup: list[str] = []
    elif language == "javascript":
        script = f"{folder}/probe.js"
        delimiter = f"EOF_SWE_PROBE_{tag}"
        setup = [f"cat > {shlex.quote(script)} <<'{delimiter}'", _NODE_SCRIPT.rstrip("\n"), delimiter]
        files = " ".join(shlex.quote(f) for f in test_files)
        body = (
            f"node {shlex.quote(script)} {files}\n"
            "if command -v npm >/dev/null 2>&1; then echo '### npm config'; npm config list --json; fi"
        )
    else:
        body, setup = _RUST, []
    out = shlex.quote(path)
    return [
        "__swe_pf=$-; { set +x; } 2>/dev/null",
        f"mkdir -p {shlex.quote(folder)}",
        *setup,
        f"{{ {body}\n}} 2>&1 | head -c {MAX_REPORT} > {out} || true",
        f"printf '%s %s %s\\n' '{PROBE_MARK}' {tag} \"$(sha256sum < {out} | cut -d' ' -f1)\"",
        *(then or []),
        'case "$__swe_pf" in *x*) set -x ;; esac',
    ]


def _test_files(instance: TaskInstance, language: str) -> list[str]:
    if language != "javascript":
        return []
    return [p for p in patch_paths(instance.test_patch) if p.endswith(_JS_SUFFIXES)]


def plan_language_probe(
    instance: TaskInstance, script: str, rng: random.Random | None = None
) -> LanguageProbePlan:
    """The probe of a Go, JavaScript or Rust row (`skipped` for other rows and unreadable scripts)."""
    language = language_of(instance)
    if language is None:
        return LanguageProbePlan(skipped="not a Go, JavaScript or Rust row")
    rng = rng or random.SystemRandom()
    lines = script.split("\n")
    starts = [i for i, line in enumerate(lines) if START_TEST_OUTPUT in line]
    ends = [i for i, line in enumerate(lines) if END_TEST_OUTPUT in line and starts and i > starts[0]]
    if len(starts) != 1 or not ends:
        return LanguageProbePlan(skipped="the script has no single pair of test-output markers")
    start, end = starts[0], ends[0]
    tag = f"{rng.getrandbits(64):016x}"
    folder = f"/tmp/.swe-rl-probe-{tag}"
    plan = LanguageProbePlan(
        language=language.name,
        tag=tag,
        clean_path=f"{folder}/clean",
        run_path=f"{folder}/run",
        guard_path=f"{folder}/guard",
    )
    files = _test_files(instance, language.name)
    split = go_command_env(test_command(script)) if language.name == "go" else None
    env = split[0] if split is not None else ""
    clean = _probe_lines(language.name, tag, plan.clean_path, files, env=env)
    guard = guard_lines(language.name, folder, plan.guard_path, tag)
    run = _probe_lines(language.name, tag, plan.run_path, files, guard, env=env)
    plan.clean_script = "\n".join([*lines[:start], *clean, *lines[end + 1 :]])
    plan.run_script = "\n".join([*lines[:start], *run, *lines[start:]])
    return plan


def read_language_probe(log: str, text: str | None, plan: LanguageProbePlan) -> LanguageProbeReport:
    """The report file's `text` (None: no file) checked against the hash the run printed in `log`."""
    head = f"{PROBE_MARK} {plan.tag} "
    line = next((ln for ln in log.split("\n") if ln.startswith(head)), None)
    if line is None:
        return LanguageProbeReport(error="no probe line in the log (the probe did not run)")
    if text is None:
        return LanguageProbeReport(error="no probe report file")
    if hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest() != line[len(head) :].strip():
        return LanguageProbeReport(error="the probe report does not match the hash printed before the tests")
    sections: dict[str, str] = {}
    name = ""
    for row in text.split("\n"):
        if row.startswith("### "):
            name = row[4:]
            sections[name] = ""
        elif name:
            sections[name] += row + "\n"
    return LanguageProbeReport(sections=sections)


# ---------------------------------------------------------------------------------------------- compare


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def _dict_diff(name: str, clean: Any, patched: Any, out: list[str], keys: tuple[str, ...] = ()) -> None:
    if isinstance(clean, dict) and isinstance(patched, dict):
        for key in sorted(set(clean) | set(patched)):
            if keys and key not in keys:
                continue
            if clean.get(key) != patched.get(key):
                out.append(
                    f"{name} {key}: {clean.get(key)!r} on the clean tree, {patched.get(key)!r} patched"
                )
    elif clean != patched:
        out.append(f"{name}: {_short(clean)} on the clean tree, {_short(patched)} patched")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def _go_list(text: str) -> dict[str, list[set[str]]]:
    out: dict[str, list[set[str]]] = {}
    for row in text.splitlines():
        cells = row.split("\t")
        if len(cells) == 6:
            out[cells[0]] = [set(c.split()) for c in cells[1:]]
    return out


def _compare_go(clean: dict[str, str], patched: dict[str, str], out: list[str]) -> None:
    env_a, env_b = _json(clean.get("go env", "")), _json(patched.get("go env", ""))
    for env in (env_a, env_b):
        if isinstance(env, dict):
            env.pop("GOGCCFLAGS", None)  # holds a temporary directory's name, new on every call
    _dict_diff("go env", env_a, env_b, out)
    mod_keys = ("Module", "Go", "Toolchain", "Replace", "Exclude", "Godebug")
    _dict_diff("go.mod", _json(clean.get("go mod", "")), _json(patched.get("go mod", "")), out, mod_keys)
    before, after = _go_list(clean.get("go list", "")), _go_list(patched.get("go list", ""))
    for pkg in sorted(before):
        if pkg not in after:
            out.append(f"go list: package {pkg} is gone")
            continue
        (go_a, ign_a, test_a, xtest_a, cgo_a), (go_b, ign_b, test_b, xtest_b, cgo_b) = before[pkg], after[pkg]
        swapped = (go_a & ign_b) | (ign_a & go_b)
        if swapped:
            out.append(f"go list {pkg}: build constraints swap {sorted(swapped)}")
        if test_a != test_b or xtest_a != xtest_b:
            out.append(f"go list {pkg}: test files {sorted(test_a | xtest_a)} -> {sorted(test_b | xtest_b)}")
        if cgo_a != cgo_b:
            out.append(f"go list {pkg}: cgo files {sorted(cgo_a)} -> {sorted(cgo_b)}")


def _compare_whole(clean: dict[str, str], patched: dict[str, str], out: list[str], skip: set[str]) -> None:
    for name in sorted(set(clean) | set(patched)):
        if name in skip:
            continue
        a, b = clean.get(name), patched.get(name)
        if a is None or b is None:
            out.append(f"{name}: {'added' if a is None else 'gone'} on the patched tree")
        else:
            _dict_diff(name, _json(a), _json(b), out)


def _cargo_targets(text: str) -> dict[str, Any]:
    data = _json(text)
    if not isinstance(data, dict):
        return {"<metadata>": data}
    out: dict[str, Any] = {}
    for pkg in data.get("packages") or []:
        name = pkg.get("name", "?")
        out[f"{name} features"] = pkg.get("features")
        out[f"{name} links"] = pkg.get("links")
        for t in pkg.get("targets") or []:
            key = f"{name} target {'/'.join(t.get('kind') or [])} {t.get('name')}"
            out[key] = {k: t.get(k) for k in ("src_path", "test", "doctest", "required-features", "edition")}
    return out


_ADDABLE_KINDS = ("bin", "example", "bench")
"""Target kinds an honest patch may add (a new binary, example or benchmark runs no test of the task's)."""
_CARGO_TOML_KEYS = ("profile", "lib", "test", "bench", "patch", "replace", "workspace")
_PACKAGE_KEYS = ("build", "links", "autotests", "autobins", "autoexamples", "autobenches", "workspace")


def _cargo_toml(text: str) -> Any:
    if load_toml is None:
        return text
    try:
        data = load_toml(text)
    except ValueError:
        return "<unparsable>"
    found = data.get("package")
    package: dict[str, Any] = found if isinstance(found, dict) else {}
    out = {k: data.get(k) for k in _CARGO_TOML_KEYS if k in data}
    out.update({f"package.{k}": package.get(k) for k in _PACKAGE_KEYS if k in package})
    return out


def _compare_rust(clean: dict[str, str], patched: dict[str, str], out: list[str]) -> None:
    before, after = (
        _cargo_targets(clean.get("cargo metadata", "")),
        _cargo_targets(patched.get("cargo metadata", "")),
    )
    for key in sorted(set(before) | set(after)):
        if key not in before:
            if key.split(" ")[2:3] and key.split(" ")[2] in _ADDABLE_KINDS:
                continue
            out.append(f"cargo metadata: {key} added")
        elif key not in after:
            out.append(f"cargo metadata: {key} gone")
        elif before[key] != after[key]:
            out.append(f"cargo metadata: {key}: {before[key]!r} -> {after[key]!r}")
    _dict_diff(
        "Cargo.toml",
        _cargo_toml(clean.get("Cargo.toml", "")),
        _cargo_toml(patched.get("Cargo.toml", "")),
        out,
    )
    _compare_whole(clean, patched, out, {"cargo metadata", "Cargo.toml"})


_COMPARE: dict[str, Callable[[dict[str, str], dict[str, str], list[str]], None]] = {
    "go": _compare_go,
    "javascript": lambda a, b, out: _compare_whole(a, b, out, set()),
    "rust": _compare_rust,
}


def compare_language_probes(
    language: str, clean: LanguageProbeReport, patched: LanguageProbeReport
) -> list[str]:
    """What differs between the clean tree's answers and the patched run's, in words."""
    out: list[str] = []
    _COMPARE[language](clean.sections, patched.sections, out)
    return list(dict.fromkeys(out))


def language_probe_records(
    language: str, clean: LanguageProbeReport, patched: LanguageProbeReport
) -> list[TamperRecord]:
    """The probe's verdict as tamper records (the shape of `runner_probe.probe_records`)."""
    if clean.error:
        return [
            TamperRecord(path="", rule="runner_probe", action="noted", reason=f"clean tree: {clean.error}")
        ]
    if patched.error:
        return [
            TamperRecord(
                path="", rule="runner_probe", action="voided", reason=f"patched tree: {patched.error}"
            )
        ]
    return [
        TamperRecord(
            path="", rule="runner_probe", action="voided", reason=f"the runner's configuration differs: {d}"
        )
        for d in compare_language_probes(language, clean, patched)[:20]
    ]
