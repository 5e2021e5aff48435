"""Before the test run, one container call: the canonical patch, the test files, the clean tree's probe.

Before the agent's patch touches the work tree the pipeline needs three things of the clean checkout:
the canonical patch (`patch.canonical`), the text of the task's test files the twins are cut from
(`twins.plant`) and the runner's configuration on the clean tree (`runner.probe`, `runner.probe_languages`).
Asked one by one they were 7 + N container calls (the patch written, the canonical exec; the reader's exec,
one read per file, its clean-up exec; the probe's evaluate, a write and an exec, and its report read back).
Here one exec runs them (issue 48: grading cost is RL throughput; the script is the exec's command, or a
file written first when it is larger than `INLINE_MAX`), and each part runs as it ran on its own, in the
same order, on the same clean tree:

0. the patch baseline (`GraderConfig.record_baseline`), as the fleet's ``record_baseline`` call took it;
1. the canonical script, in a subshell (a private index and object store: the work tree is only read);
2. the test files' reader, in a subshell (a private index on the base commit: git objects only);
3. only when ``git apply`` accepted the patch: the clean tree's probe script, as ``evaluate`` runs an eval
   script (``bash <file>`` from the work directory, same environment), bounded by the evaluation timeout;
   its report file (and, for Go/JavaScript/Rust, its log) printed back base64.

Nothing of the agent's runs before or during this call: the patch is only applied to a private index.
Output the fleet truncated (head and tail kept) is never parsed: the calls are made again one by one.

The clean tree's answers (the test files, the probe's report) depend on the task alone — its image, its
eval script, which stages are on — never on the patch: RL grades a group of patches per task, so the
first grading's answers are kept (`CLEAN_CACHE` tasks, in this process) and the later ones ask only for
the canonical patch (nor the image's interpreter: `canonical.InterpreterFacts`). Their probe runs under
the same random names as the kept clean run (no patch sees either); only a complete answer is kept (a
valid report, every file read), so a failure is asked again. A group's patches are graded at the same
time: while one grading of a task asks the clean tree, the others of that task wait for its answer
instead of each asking it too (one clean run per task, not one per patch of the group). With a store
directory (`clean_store`: certification writes it) a process's first grading of a task reads the answers
another process asked, keyed by the image ID the fleet reported for the container.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from swe_rl.fleet.client import Lease
from swe_rl.fleet.errors import FileNotFound
from swe_rl.grading.clean_store import CleanAnswers, CleanStore, StoredClean, store_for
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.patch.canonical import (
    WORK_DIR,
    CanonicalPatch,
    canonicalise,
    parse_output,
)
from swe_rl.grading.prerun_script import _Plans, bundle_script
from swe_rl.grading.runner.probe import ProbePlan, ProbeReport, plan_probe, probe_names, read_probe_report
from swe_rl.grading.runner.probe_languages import (
    LanguageProbePlan,
    LanguageProbeReport,
    plan_language_probe,
    read_language_probe,
)
from swe_rl.grading.twins.plant import files_to_read, read_test_files, search_patterns
from swe_rl.tasks import TaskInstance

__all__ = ["CleanTree", "forget_stored", "read_clean_tree"]

MAX_OUTPUT = 16 << 20
"""The exec's output kept (the fleet's evaluation cap): past it the calls are made one by one."""
CLEAN_CACHE = 256
"""Tasks whose clean-tree answers this process keeps (least recently used dropped first)."""
INLINE_MAX = 96 << 10
"""A bundle up to this size is the exec's command itself (one container call; one argument of a command
line holds 128 KiB); a larger one is written to a file first, then run (two calls)."""


@dataclass
class CleanTree:
    """What the clean checkout answered before the test run."""

    canonical: CanonicalPatch
    sources: dict[str, str | None] = field(default_factory=dict)
    """The test files' text (twins on; None: not there or not UTF-8)."""
    probe_plan: ProbePlan | None = None
    """The test run's probe plan (None: no pytest probe)."""
    clean: ProbeReport | None = None
    language_plan: LanguageProbePlan | None = None
    """Go, JavaScript, Rust: the plan of the test run (None: no language probe)."""
    language_clean: LanguageProbeReport | None = None
    calls: int = 0
    """Container calls made (the bench's breakdown)."""
    cached: bool = False
    """The clean tree's answers were this task's kept ones (no reader, no clean probe ran)."""
    stored: str = ""
    """The store key when the kept answers were read from `clean_store` (not asked in this process): a
    void on them is checked against a live answer (`forget_stored`)."""


class _Kept(CleanAnswers):
    """One task's clean-tree answers as this process keeps them."""

    stored: str = ""
    """Read from the store under this key ('' : asked in this process)."""
    image_id: str = ""
    """The image ID of the container it was asked in ('' : not reported): only under it is it stored."""


_kept: OrderedDict[str, _Kept] = OrderedDict()
_asking: dict[tuple[int, str], asyncio.Event] = {}
"""(event loop, task key) -> set when the grading asking that task's clean tree is done, kept or not."""


def _task_key(instance: TaskInstance, script: str, config: GraderConfig) -> str:
    parts = (
        instance.image,
        instance.instance_id,
        config.integrity.twins,
        config.integrity.runner_probe,
        script,
    )
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _keep(key: str, names: tuple[str, str] | None, got: CleanTree, image_id: str) -> _Kept | None:
    complete = (
        got.canonical.applied
        and all(text is not None for text in got.sources.values())
        and (got.clean is None or not got.clean.error)
        and (got.language_clean is None or not got.language_clean.error)
    )
    if complete:
        facts = got.canonical.interpreter
        interpreter = facts if facts.python else None
        kept = _Kept(
            names=names,
            sources=dict(got.sources),
            clean=got.clean,
            language_plan=got.language_plan,
            language_clean=got.language_clean,
            interpreter=interpreter,
            image_id=image_id,
        )
        _remember(key, kept)
        return kept
    return None


def _remember(key: str, kept: _Kept) -> None:
    _kept[key] = kept
    _kept.move_to_end(key)
    while len(_kept) > CLEAN_CACHE:
        _kept.popitem(last=False)


def _image_id(lease: Lease) -> str:
    return getattr(lease, "image_id", "") or ""


def _store_key(
    lease: Lease, instance: TaskInstance, key: str, config: GraderConfig
) -> tuple[CleanStore, str] | None:
    """The store and this task's key in it (None: no store, or the fleet did not report the image ID)."""
    store = store_for(config.clean_store)
    image_id = _image_id(lease)
    if store is None or not image_id:
        return None
    return store, CleanStore.key(key, instance.model_dump_json(), image_id)


def _from_store(lease: Lease, instance: TaskInstance, key: str, config: GraderConfig) -> _Kept | None:
    where = _store_key(lease, instance, key, config)
    stored = where[0].get(where[1]) if where is not None else None
    if stored is None or where is None:
        return None
    kept = _Kept(**stored.answers(), stored=where[1])
    _remember(key, kept)
    return kept


def _to_store(
    lease: Lease, instance: TaskInstance, key: str, config: GraderConfig, kept: _Kept, fresh: bool
) -> None:
    """A live answer into the store, under the image ID it was asked on: a `fresh` one always (it replaces
    what the store held), one kept from an earlier grading of this process when the store lacks it
    (certification in a long-lived process)."""
    if kept.stored or not kept.image_id or kept.image_id != _image_id(lease):
        return
    where = _store_key(lease, instance, key, config)
    if where is not None and (fresh or not where[0].has(where[1])):
        where[0].put(StoredClean(key=where[1], **kept.answers()))


def forget_stored(config: GraderConfig, stored: str) -> None:
    """A stored answer a void rested on: dropped from the store and the process, asked live next time."""
    for key in [k for k, kept in _kept.items() if kept.stored == stored]:
        del _kept[key]
    store = store_for(config.clean_store)
    if store is not None:
        store.drop(stored)


def forget_clean_trees() -> None:
    """Drop every kept answer (tests; an image rebuilt under the same name)."""
    _kept.clear()


def _plans(
    instance: TaskInstance, script: str, config: GraderConfig, names: tuple[str, str] | None = None
) -> _Plans:
    paths = files_to_read(instance) if config.integrity.twins else []
    search = config.integrity.twins and bool(search_patterns(instance)[0])
    python: tuple[ProbePlan, ProbePlan] | None = None
    language: LanguageProbePlan | None = None
    if config.integrity.runner_probe:
        names = names or probe_names()
        decisive = [*instance.fail_to_pass, *instance.pass_to_pass]
        clean = plan_probe(script, names, collect_only=True, decisive=decisive)
        if not clean.skipped:
            python = (clean, plan_probe(script, names, collect_only=False, decisive=decisive))
        candidate = plan_language_probe(instance, script)
        if not candidate.skipped and python is None:  # (a pytest row has no language probe)
            language = candidate
    return _Plans(paths, python, language, names, search)


def _sections(output: str, mine: str) -> dict[str, str]:
    out: dict[str, str] = {}
    name: str | None = None
    for line in output.split("\n"):
        if line.startswith(f"--{mine}-") and line.endswith("--"):
            name = line[len(mine) + 3 : -2]
            out[name] = ""
        elif name is not None:
            out[name] += line
    return out


def _text(data: str | None) -> str | None:
    return None if data is None else base64.b64decode(data).decode("utf-8", "surrogateescape")


def _finish(plans: _Plans, canonical: CanonicalPatch, parts: dict[str, str], calls: int) -> CleanTree:
    out = CleanTree(canonical=canonical, calls=calls)
    for i, path in enumerate(plans.paths):
        data = parts.get(f"file-{i}")
        try:
            out.sources[path] = None if data is None else base64.b64decode(data).decode("utf-8")
        except UnicodeDecodeError:  # bytes that are not text: no twin of it (as `read_test_files`)
            out.sources[path] = None
    found = _text(parts.get("found")) or ""
    for i, path in enumerate(p for p in found.split("\n") if p):
        data = parts.get(f"found-{i}")
        try:
            out.sources[path] = None if data is None else base64.b64decode(data).decode("utf-8")
        except UnicodeDecodeError:
            out.sources[path] = None
    if not canonical.applied:
        return out
    report = _text(parts.get("report"))
    if plans.python is not None:
        out.probe_plan, out.clean = plans.python[1], read_probe_report(report, plans.python[0])
    if plans.language is not None:
        out.language_plan = plans.language
        out.language_clean = read_language_probe(_text(parts.get("log")) or "", report, plans.language)
    return out


async def _one_by_one(
    lease: Lease, instance: TaskInstance, patch: str, plans: _Plans, config: GraderConfig, roots: list[str]
) -> CleanTree:
    """The same answers, one container call each (the bundle's output did not come back whole)."""
    canonical = await canonicalise(lease, patch, extra_roots=roots)
    out = CleanTree(canonical=canonical, calls=2)
    if plans.reads:
        out.sources = await read_test_files(lease, instance, plans.paths)
        out.calls += 2 + len(plans.paths)
    if not canonical.applied or not plans.clean_script:
        return out
    run = await lease.evaluate("", plans.clean_script, timeout=config.eval_timeout)
    try:
        text: str | None = (await lease.read_file(plans.clean_report)).decode("utf-8", "surrogateescape")
    except FileNotFound:
        text = None
    out.calls += 3
    if plans.python is not None:
        out.probe_plan, out.clean = plans.python[1], read_probe_report(text, plans.python[0])
    if plans.language is not None:
        out.language_plan = plans.language
        out.language_clean = read_language_probe(run.test_log or "", text, plans.language)
    return out


def _usable(key: str, store: bool) -> _Kept | None:
    """This task's kept answers, unless they came from the store and `store` is off."""
    kept = _kept.get(key)
    return None if kept is None or (kept.stored and not store) else kept


async def read_clean_tree(
    lease: Lease,
    instance: TaskInstance,
    patch: str,
    script: str,
    config: GraderConfig,
    roots: list[str],
    store: bool = True,
) -> CleanTree:
    """Stage 1 and the clean tree's answers (raises ValueError when the canonical script failed).
    `store`: answers read from the store may serve (False: only ones asked live, in this process)."""
    key = _task_key(instance, script, config)
    kept = _usable(key, store)
    if kept is None and store:
        kept = _from_store(lease, instance, key, config)
    asking = (id(asyncio.get_running_loop()), key)
    if kept is None and asking in _asking:  # another grading of this task asks it: its answer serves
        await _asking[asking].wait()
        kept = _usable(key, store)
    if kept is not None:
        return await _read(lease, instance, patch, script, config, roots, key, kept)
    done = _asking[asking] = asyncio.Event()
    try:
        return await _read(lease, instance, patch, script, config, roots, key, None)
    finally:
        done.set()
        if _asking.get(asking) is done:
            del _asking[asking]


async def _read(
    lease: Lease,
    instance: TaskInstance,
    patch: str,
    script: str,
    config: GraderConfig,
    roots: list[str],
    key: str,
    kept: _Kept | None,
) -> CleanTree:
    plans = _plans(instance, script, config, kept.names if kept is not None else None)
    asked = _Plans([], None, None) if kept is not None else plans  # kept: the canonical patch alone
    marker, mine = secrets.token_hex(8), secrets.token_hex(8)
    facts = kept.interpreter if kept is not None else None
    bundle = bundle_script(
        instance,
        patch,
        asked,
        marker,
        mine,
        roots,
        config.eval_timeout,
        interpreter=facts is None,
        baseline=config.record_baseline,
    )
    command, calls = bundle, 1
    if len(bundle) > INLINE_MAX or not bundle.isascii():  # (base64 and ASCII scripts: ASCII in practice)
        path = f"{WORK_DIR}/prerun.sh"
        await lease.write_file(path, bundle.encode("utf-8", "surrogateescape"))
        command, calls = f"bash {path}", 2
    res = await lease.exec(
        command,
        timeout=300 + (config.eval_timeout + 30 if asked.clean_script else 0),
        max_output_bytes=MAX_OUTPUT,
        separate_stderr=True,
    )
    parts = _sections(res.output, mine)
    if res.truncated or "done" not in parts:
        if res.returncode != 0 and not res.truncated:
            raise ValueError(
                f"canonical patch script failed ({res.returncode}): {(res.stderr or res.output)[-2000:]}"
            )
        got = await _one_by_one(lease, instance, patch, asked, config, roots)
    else:
        got = _finish(asked, parse_output(res.output, marker), parts, calls=calls)
    if facts is not None and got.canonical.applied:  # the kept answer of the image's interpreter
        got.canonical = got.canonical.model_copy(update={"interpreter": facts})
    if kept is None:
        fresh = _keep(key, plans.names, got, _image_id(lease))
        if fresh is not None:
            _to_store(lease, instance, key, config, fresh, fresh=True)
        return got
    if not got.canonical.applied:
        return got
    _to_store(lease, instance, key, config, kept, fresh=False)
    out = replace(got, sources=dict(kept.sources), cached=True, stored=kept.stored)
    if plans.python is not None and kept.clean is not None:
        out.probe_plan, out.clean = plans.python[1], kept.clean
    if kept.language_plan is not None and kept.language_clean is not None:
        out.language_plan, out.language_clean = kept.language_plan, kept.language_clean
    return out
