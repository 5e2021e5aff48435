"""The runner's effective configuration, asked of the runner itself (a stage of the grading pipeline).

A parser of the runner's files is one line ending, one precedence rule or one plugin name built at run
time behind the runner: ``\\x0c`` splits an ini line for pytest (``str.splitlines``) but not for
configparser; pytest reads ``pytest.ini`` before ``pyproject.toml`` before ``tox.ini`` before
``setup.cfg``, from a rootdir it derives from the arguments; a plugin can be named by a string
computed at run time. So the grader asks pytest what it ended up with:

- `plan_probe` puts a grader-owned plugin on the test command (``PYTHONPATH=<dir> pytest -p <module>``):
  the module is written by the eval script outside the repository, under a random name per grading;
  the clean probe (test patch applied, no agent patch) adds ``--collect-only`` (``--co`` is ambiguous on pytest 4.5-5.2) and writes no bytecode (a
  same-size fix applied within the same second would otherwise meet the clean sources' ``.pyc``), the
  patched one is **the test run itself** (a separate probe run could be told apart from the run that
  pays, e.g. by ``--collect-only`` in ``sys.argv``);
- the plugin records, after collection and at the session's end, ``rootdir``, the ini file, every ini
  value the file sets plus those that change outcomes, the ``config.option`` values that change
  outcomes, the plugins loaded (name and module file), the conftest files, the args and how many
  items were collected; it writes them to a report file signed with an HMAC whose key it reads, once,
  from a pipe the runner shell opened (``exec N< <(printf ...)`` with tracing off, in the script bash parsed whole
  and removed before the tests start): the key is in no file, environment or command line;
- the run formats failures with Python's own traceback (``--tb=native``) unless its command names
  ``--tb``: pytest's default form parses the whole test file's syntax tree for every failure (0.1 s a
  failure in a 5,800-line file), which the twins, failing by design, paid on every grading; the
  outcomes and the ``-rA`` summary lines are the same in every style;
- `compare_probes` lists what differs; a difference voids the reward (`probe_records`). A forged
  report needs the key; a missing or unsigned report on the patched tree when the clean tree gave
  one voids too (the agent's code stopped the runner or took the key). A clean tree without a report
  is the instance's or the grader's matter: recorded, not voided.

What remains: code imported before the plugin (an ini ``-p`` comes before the command line's) can
read the pipe first; then the plugin gets no key and the run is voided, unless that code also feeds
a key back (``os.dup2`` of a pipe of its own), which takes descriptor tricks the capability scan
flags. The report is read at collection's end and the session's end: a change made in between and
undone before the end is not seen.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import random
import re
import shlex
from typing import Any

from pydantic import BaseModel, Field

from swe_rl.grading.integrity import TamperRecord
from swe_rl.grading.runner.command import read_runner_command
from swe_rl.grading.runner.guard import GUARD_SOURCE, guard_records
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

__all__ = [
    "ProbePlan",
    "ProbeReport",
    "compare_probes",
    "plan_probe",
    "probe_records",
    "read_probe_report",
    "widen_decisive",
]

INI_NAMES = (
    "addopts python_files python_classes python_functions testpaths norecursedirs usefixtures "
    "filterwarnings xfail_strict required_plugins console_output_style log_cli log_level log_format "
    "log_cli_level log_file log_file_level empty_parameter_set_mark markers minversion pythonpath "
    "doctest_optionflags doctest_encoding junit_family consider_namespace_packages"
).split()
"""Ini values that change what runs or how it is reported (besides every key the ini file sets)."""
OPTION_NAMES = (
    "plugins exitfirst maxfail keyword markexpr runxfail reportchars tbstyle verbose importmode "
    "rootdir confcutdir deselect ignore ignore_glob continue_on_collection_errors strict_markers "
    "strict_config strict noconftest lf last_failed_no_failures failedfirst newfirst stepwise "
    "stepwise_skip pyargs override_ini capture showcapture disable_warnings doctestmodules doctestglob "
    "usepdb trace setuponly setupshow setupplan keepduplicates collect_in_virtualenv inifilename "
    "assertmode xfail_tb python_files pythonwarnings"
).split()
"""``config.option`` values that change outcomes (``collectonly`` is the clean probe's own)."""

_PLUGIN = '''"""swe-rl grading probe: reports pytest's effective configuration (grader-owned, not the repo's).
PYTEST_DONT_REWRITE: no assert in it, and pytest would walk its whole syntax tree for them on every run."""
import hashlib, hmac, json, os, sys

_INI = {ini!r}
_OPTIONS = {options!r}
_SELF = __name__
_DECISIVE = {decisive!r}
_DECISIVE = None if _DECISIVE is None else frozenset(_DECISIVE)  # (asked per test)


def _key(fd={fd}):
    try:
        data = os.read(fd, 256).strip()
        os.close(fd)
    except OSError:
        return b""
    return data


def _signer(key):
    def sign(data):
        return hmac.new(key, data, hashlib.sha256).hexdigest() if key else ""
    return sign


_sign = _signer(_key())
del _key, _signer
_seen = {{}}
_seen["path"] = [p for p in (os.path.realpath(p or ".") for p in sys.path)
                 if os.path.isdir(p) and not p.startswith(("/tmp", "/proc", "/dev"))]


def _file(obj):
    path = getattr(obj, "__file__", None)
    if not path:
        path = getattr(sys.modules.get(getattr(type(obj), "__module__", ""), None), "__file__", None)
    return os.path.realpath(path) if isinstance(path, str) else ""


def _snapshot(config, session):
    pm = config.pluginmanager
    me = sys.modules.get(_SELF)
    plugins, conftests = set(), set()
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            plugins.add("blocked " + name)
            continue
        if plugin is me or name == _SELF:
            continue
        path = _file(plugin)
        if os.path.basename(path) == "conftest.py":
            conftests.add(path)
        if name.isdigit():
            name = "<%s.%s>" % (type(plugin).__module__, type(plugin).__qualname__)
        plugins.add(name + " @ " + path)
    ini = {{}}
    raw = dict(getattr(config, "inicfg", {{}}) or {{}})
    for name in sorted(set(raw) | set(_INI)):
        try:
            ini[name] = repr(config.getini(name))
        except Exception:
            ini[name] = repr(raw.get(name))
    option = vars(config.option)
    options = {{n: repr(option.get(n)) for n in _OPTIONS if n in option}}
    options["plugins"] = repr([p for p in option.get("plugins") or [] if p != _SELF])
    rootdir = getattr(config, "rootpath", None) or getattr(config, "rootdir", "")
    inifile = getattr(config, "inipath", None) or getattr(config, "inifile", None)
    return {{
        "rootdir": str(rootdir),
        "inifile": str(inifile) if inifile else "",
        "ini": ini,
        "options": options,
        "option_names": sorted(option),
        "args": [str(a) for a in getattr(config, "args", [])],
        "plugins": sorted(plugins),
        "conftests": sorted(conftests),
        "env": {{k: os.environ.get(k) for k in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS",
                                              "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}},
        "items": len(getattr(session, "items", None) or []),  # (compared by no one: the ids were 50 KB)
    }}


def _write(config, session, when, machinery=None):
    if when in ("collected", "finished"):
        try:
            _seen[when] = _snapshot(config, session)
            if machinery is not None:
                _seen[when]["machinery"] = sorted(machinery)
        except Exception as exc:
            _seen[when] = {{"error": "%s: %s" % (type(exc).__name__, exc)}}
    body = json.dumps(_seen, sort_keys=True).encode()
    sig = _sign(body)
    if not sig:
        return
    with open({report!r}, "wb") as fh:
        fh.write(body + b"\\n" + sig.encode())
'''

_RUNNER = re.compile(r"(?:^|(?<=\s))(?:\S*/)?(?:python[\d.]*\s+-m\s+pytest|pytest|py\.test)(?=\s|$)")
_TB = re.compile(r"(?:^|\s)--tb(?:[=\s]|$)")
"""The test command sets its own traceback style (kept)."""


class ProbePlan(BaseModel):
    """One probe run: the script to run and where its report lands."""

    script: str
    """The eval script with the probe plugin on its test command (unchanged when `skipped`)."""
    module: str = ""
    """The plugin's module name (random per grading; the clean and patched runs share it)."""
    report_path: str = ""
    """Where the plugin writes its signed report (read back with ``Lease.read_file``)."""
    key: str = ""
    """The HMAC key the plugin reads from the pipe (never written to a file the tests can read)."""
    skipped: str = ""
    """Why no probe runs ("" when it does)."""


class ProbeReport(BaseModel):
    """What the plugin reported: a snapshot after collection and one at the session's end."""

    collected: dict[str, Any] = Field(default_factory=dict)
    finished: dict[str, Any] = Field(default_factory=dict)
    run: dict[str, Any] = Field(default_factory=dict)
    """What the run-time checks found (`runner_guard`): ``changes`` of the runner's machinery after
    collection, ``imports`` of modules from files no scan read."""
    path: list[str] = Field(default_factory=list)
    """The interpreter's import path as the plugin was imported (before any code of the repository),
    directories only, none under /tmp, /proc, /dev: the clean run's is where the run-writes listing looks
    besides the repository (`scans.run_writes`), instead of asking the interpreter once more."""
    error: str = ""
    """Why there is no valid report ("" when there is): missing, unsigned, forged signature."""


def probe_names(rng: random.Random | None = None) -> tuple[str, str]:
    """(module name, directory) for one grading: random, so no patch can name or block them."""
    rng = rng or random.SystemRandom()
    tag = f"{rng.getrandbits(64):016x}"
    return f"swe_probe_{tag}", f"/tmp/.swe-rl-probe-{tag}"


def plan_probe(
    script: str,
    names: tuple[str, str],
    *,
    collect_only: bool,
    rng: random.Random | None = None,
    decisive: list[str] | None = None,
) -> ProbePlan:
    """`script` with the probe plugin on its test command; `collect_only`: the clean tree's probe.
    `decisive`: the tests whose outcomes decide the verdict (FAIL_TO_PASS and PASS_TO_PASS, public): the
    runner guard's check before a report runs for those (for every test when one of them is not among
    the collected ids, or when None)."""
    rng = rng or random.SystemRandom()
    lines = script.split("\n")
    starts = [i for i, line in enumerate(lines) if START_TEST_OUTPUT in line]
    ends = [i for i, line in enumerate(lines) if END_TEST_OUTPUT in line and starts and i > starts[0]]
    if len(starts) != 1 or not ends:
        return ProbePlan(script=script, skipped="the script has no single pair of test-output markers")
    body = [
        i for i in range(starts[0] + 1, ends[0]) if lines[i].strip() and not lines[i].strip().startswith("#")
    ]
    command = read_runner_command([lines[i] for i in body])
    if command.runner != "pytest":
        return ProbePlan(
            script=script, skipped=f"the test runner is not a plain pytest call ({command.runner})"
        )
    module, folder = names
    key = f"{rng.getrandbits(256):064x}"
    fd = rng.randint(64, 200)  # bash puts a process substitution on 63 (then 62...): never under it
    plan = ProbePlan(
        script="", module=module, report_path=f"{folder}/report-{rng.getrandbits(32):08x}", key=key
    )
    line = lines[body[0]]
    runner = _RUNNER.search(line)
    if runner is None:  # read_runner_command said pytest: cannot happen, but never guess
        return ProbePlan(script=script, skipped="the pytest word was not found on the test command")
    head, tail = line[: runner.end()], line[runner.end() :]
    native = "" if _TB.search(tail) else " --tb=native"  # (the clean probe too: the same options)
    extra = f" -p {module}{native}" + (
        " --collect-only" if collect_only else ""
    )  # pytest 4.5-5.2: ``--co`` is ambiguous
    if re.search(r"(?:^|\s)PYTHONPATH=", head):
        head = re.sub(r"((?:^|\s)PYTHONPATH=)", rf"\g<1>{folder}:", head, count=1)
    else:
        head = f"PYTHONPATH={folder}${{PYTHONPATH:+:$PYTHONPATH}} {head}"
    if collect_only:  # no bytecode from the clean sources: a same-size fix applied within the same second
        head = f"PYTHONDONTWRITEBYTECODE=1 {head}"  # would otherwise run the stale .pyc in the test run
    lines[body[0]] = head + extra + tail
    source = (
        _PLUGIN.format(
            ini=INI_NAMES,
            options=OPTION_NAMES,
            fd=fd,
            report=plan.report_path,
            decisive=None if decisive is None else sorted(set(decisive)),
        )
        + GUARD_SOURCE
    )
    delimiter = f"EOF_SWE_PROBE_{rng.getrandbits(64):016x}"
    path = shlex.quote(f"{folder}/{module}.py")
    setup = [
        "__swe_pf=$-; { set +x; } 2>/dev/null",
        f"mkdir -p {shlex.quote(folder)}; rm -f {shlex.quote(plan.report_path)}",
        f"cat > {path} <<'{delimiter}'",
        source.rstrip("\n"),
        delimiter,
        f"exec {fd}< <(printf '%s\\n' {key})",
        'case "$__swe_pf" in *x*) set -x ;; esac',
    ]
    lines[starts[0] : starts[0]] = setup
    plan.script = "\n".join(lines)
    return plan


def widen_decisive(script: str, extra: list[str]) -> str:
    """`script` (a planned test run) with `extra` ids among the tests the guard checks before: the ids a
    swapped twin's original runs under (`twins.plant.swapped_originals`) decide the verdict too. A script
    without the probe, or whose guard checks every test, is returned as it is."""
    if not extra:
        return script
    lines = script.split("\n")
    inside = False
    for i, line in enumerate(lines):
        if "EOF_SWE_PROBE_" in line:
            inside = not inside
        elif inside and line.startswith("_DECISIVE = ") and "frozenset" not in line:
            value = ast.literal_eval(line[len("_DECISIVE = ") :])
            if value is None:
                return script
            lines[i] = f"_DECISIVE = {sorted({*value, *extra})!r}"
            return "\n".join(lines)
    return script


def read_probe_report(text: str | None, plan: ProbePlan) -> ProbeReport:
    """The report file's text checked against the plan's key (None: no file)."""
    if text is None or not text.strip():
        return ProbeReport(error="no probe report (the runner did not reach the end of collection)")
    body, _, sig = text.rstrip("\n").rpartition("\n")
    want = hmac.new(plan.key.encode(), body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(sig.strip(), want):
        return ProbeReport(error="the probe report's signature does not match (written by another hand)")
    try:
        data = json.loads(body)
    except ValueError:
        return ProbeReport(error="the probe report does not parse")
    path = data.get("path")
    return ProbeReport(
        collected=data.get("collected") or {},
        finished=data.get("finished") or {},
        run=data.get("run") or {},
        path=[p for p in path if isinstance(p, str)] if isinstance(path, list) else [],
    )


_RUN_TIME = ("items", "plugins", "conftests")
"""Left out of the session-end comparison: what honest tests register while they run (a fixture adding a
plugin object to the main config) would differ from a collect-only run; the collection snapshot has them."""


def _without(snapshot: dict[str, Any], drop_args: set[str], when: str) -> dict[str, Any]:
    out = {k: v for k, v in snapshot.items() if k != "items" and (when == "collected" or k not in _RUN_TIME)}
    out["args"] = [a for a in out.get("args", []) if a.rsplit("/", 1)[-1].split("::")[0] not in drop_args]
    return out


def _diff(clean: Any, patched: Any, path: str, out: list[str]) -> None:
    if isinstance(clean, dict) and isinstance(patched, dict):
        for key in sorted(set(clean) | set(patched)):
            _diff(clean.get(key), patched.get(key), f"{path}.{key}" if path else key, out)
    elif (
        isinstance(clean, list)
        and isinstance(patched, list)
        and path in ("plugins", "conftests", "option_names", "machinery")
    ):
        for item in sorted(set(patched) - set(clean)):
            out.append(f"{path}: added {item}")
        for item in sorted(set(clean) - set(patched)):
            out.append(f"{path}: gone {item}")
    elif clean != patched:
        out.append(f"{path}: {clean!r} on the clean tree, {patched!r} on the patched tree")


def compare_probes(
    clean: ProbeReport, patched: ProbeReport, ignore_files: set[str] | None = None
) -> list[str]:
    """What differs between the clean tree's configuration and the patched run's (`ignore_files`: base
    names of grader-owned test files the patched run alone names, the canaries)."""
    drop = ignore_files or set()
    out: list[str] = []
    for when in ("collected", "finished"):
        a, b = getattr(clean, when), getattr(patched, when)
        if a and b:
            _diff(_without(a, drop, when), _without(b, drop, when), "", out)
    return list(dict.fromkeys(out))


def probe_records(
    clean: ProbeReport,
    patched: ProbeReport,
    ignore_files: set[str] | None = None,
    *,
    repo: str = "",
    pytest_repos: list[str] | None = None,
) -> list[TamperRecord]:
    """The probe's verdict as tamper records: ``voided`` per difference and per change of the runner's
    machinery during the run (`runner_guard`; ``noted`` on a repository in `pytest_repos`), ``noted``
    when it could not compare."""
    ran = (
        []
        if patched.error
        else guard_records(
            not clean.error and bool(clean.finished),
            patched.run,
            bool(patched.finished),
            repo,
            pytest_repos or [],
        )
    )
    if clean.error:
        return [
            TamperRecord(path="", rule="runner_probe", action="noted", reason=f"clean tree: {clean.error}"),
            *ran,
        ]
    if patched.error or not patched.collected:
        reason = patched.error or "the patched run reported no configuration after collection"
        return [TamperRecord(path="", rule="runner_probe", action="voided", reason=f"patched tree: {reason}")]
    return [
        *(
            TamperRecord(
                path="",
                rule="runner_probe",
                action="voided",
                reason=f"the runner's configuration differs: {d}",
            )
            for d in compare_probes(clean, patched, ignore_files)[:20]
        ),
        *ran,
    ]
