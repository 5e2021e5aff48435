"""Canary tests in Go, JavaScript (node's runner) and Rust test runs (stage 4 for those languages).

`swe_rl.grading.canaries.plan.plan_canaries` puts the nonce markers around any test command but plants its
Python canaries only in pytest runs. For a row of `swe_rl.grading.languages` this adds a test file of the
grader's own in that language, written right before the test command and removed after it, with two
tests that must pass and two that must fail (random names and values per run). Code under test that
forges result lines and stops the real ones (a Go ``init()`` printing ``--- PASS`` lines then exiting)
loses the must-pass canaries; one that reports every test of the package as passed flips the must-fail
ones; `check_canaries` voids both. Commands that select tests (``go test -run``, ``cargo test NAME``,
``--lib``) and runners other than ``go test``, ``node --test`` and ``cargo test`` get none (`skipped`); a
``go test`` may start with the assignments `languages.go_command_env` accepts (``GO111MODULE=off``...).
"""

from __future__ import annotations

import posixpath
import random
import re
import shlex

from swe_rl.grading.canaries.plan import CanaryPlan
from swe_rl.grading.integrity import patch_paths
from swe_rl.grading.languages import go_command_env, language_of, test_command
from swe_rl.grading.patch.split import split_patch
from swe_rl.grading.runner.machinery_sources import GO_IMPORTS, go_guard
from swe_rl.tasks import TaskInstance
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT

__all__ = ["plant_language_canaries"]

_WORDS = (
    "amber basalt cedar delta ember fjord garnet harbor indigo juniper kestrel lagoon meadow nectar onyx "
    "pepper quartz raven saffron tundra umber velvet walnut yarrow zephyr"
).split()
_CARGO_SELECTING = {
    "--lib",
    "--test",
    "--doc",
    "--bin",
    "--bins",
    "--example",
    "--examples",
    "--bench",
    "--benches",
}
_CARGO_VALUED = {
    "-p",
    "--package",
    "-F",
    "--features",
    "--manifest-path",
    "-j",
    "--jobs",
    "--target",
    "--profile",
}


def _refusal(language: str, words: list[str]) -> str:
    text = " ".join(words)
    if language == "go":
        split = go_command_env(words)
        if split is None or split[1][:2] != ["go", "test"] or "-run" in text or "-list" in text:
            return "the test command is not a plain `go test` of packages"
    elif language == "javascript":
        if not words or words[0] != "node" or "--test" not in words or "--test-name-pattern" in text:
            return "canaries join node's own runner only (`node --test`)"
    elif language == "rust":
        if words[:2] != ["cargo", "test"]:
            return "the test command is not `cargo test`"
        args = words[2 : words.index("--")] if "--" in words else words[2:]
        for i, word in enumerate(args):
            if word in _CARGO_SELECTING or (
                not word.startswith("-") and (i == 0 or args[i - 1] not in _CARGO_VALUED)
            ):
                return "the cargo command selects tests"
    else:
        return f"no canaries for {language}"
    return ""


def _source(
    language: str,
    names: list[str],
    values: tuple[int, int, int, int],
    guard: tuple[str, str] = ("", ""),
    bound: tuple[str, str] = ("test", "assert"),
) -> str:
    """The canaries' file; `guard` (Go): (a random prefix, the report's path) of the runner's check
    (`runner.machinery`), run at the file's ``init`` and in the must-pass canaries. `bound` (JavaScript):
    the names ``node:test`` and ``node:assert`` are bound to (the file's own, or names of their own for
    lines appended to a test file of the task's: no clash with its bindings)."""
    a, b, c, d = values
    checks = [f"{a} + {b} == {a + b}", f"{c} < {d}", f"{c} * {d} == {c * d + 1}", f"{a} == {b + a + 1}"]
    if language == "go":
        prefix, report = guard
        calls = [f'\t{prefix}Check("{n}")\n' if prefix and k < 2 else "" for k, n in enumerate(names)]
        body = "".join(
            f'\nfunc {n}(t *testing.T) {{\n{call}\tif !({check}) {{\n\t\tt.Fatal("no")\n\t}}\n}}\n'
            for n, check, call in zip(names, checks, calls, strict=True)
        )
        if not prefix:
            return 'import "testing"\n' + body
        imports = "".join(f'\t"{m}"\n' for m in (*GO_IMPORTS, "testing"))
        return f"import (\n{imports})\n" + body + go_guard(prefix, report)
    if language == "javascript":
        test, assert_ = bound
        body = "".join(
            f"{test}({n!r}, () => {{\n  {assert_}.ok({check.replace('==', '===')});\n}});\n"
            for n, check in zip(names, checks, strict=True)
        )
        head = "'use strict';\n" if bound == ("test", "assert") else ""
        return (
            f"{head}const {test} = require('node:test');\nconst {assert_} = require('node:assert');\n" + body
        )
    return "".join(
        f"#[test]\nfn {n}() {{\n    assert!({check});\n}}\n" for n, check in zip(names, checks, strict=True)
    )


def _rust_host(instance: TaskInstance) -> str:
    """The integration test file (``tests/<name>.rs``, a crate of its own) whose part of the test patch
    defines a FAIL_TO_PASS test: the run builds and runs its binary anyway, with libtest (the test is
    reported by name), so canaries appended there cost no binary of their own. "" when none does."""
    names = {t.rsplit("::", 1)[-1] for t in instance.fail_to_pass}
    _, files = split_patch(instance.test_patch or "")
    for fd in files:
        path = fd.new_path or ""
        if not (path.startswith("tests/") and path.count("/") == 1 and path.endswith(".rs")):
            continue
        if any(re.search(rf"\bfn\s+{re.escape(n)}\s*\(", fd.text()) for n in names if n):
            return path
    return ""


def _js_host(instance: TaskInstance, words: list[str]) -> str:
    """The CommonJS-looking test file (``.js``/``.cjs``) whose part of the test patch names a FAIL_TO_PASS
    test, when the command names no test file (node finds the files it runs, that one included: it runs a
    FAIL_TO_PASS test): node's runner starts a process per test file, so canaries appended there cost no
    process of their own. "" when none does, or the command names its files (a file of our own that
    only the run could choose would have to be on the command line)."""
    if any(word.endswith((".js", ".mjs", ".cjs", ".ts")) for word in words):
        return ""
    names = {t.removeprefix("- ").strip() for t in instance.fail_to_pass} - {""}
    _, files = split_patch(instance.test_patch or "")
    for fd in files:
        path = fd.new_path or ""
        if not _NODE_TEST_FILE.search(path) or path.startswith("/"):
            continue
        text = fd.text()
        if any(re.search(_JS_DEFINES.format(re.escape(n)), text) for n in names):
            return path
    return ""


_NODE_TEST_FILE = re.compile(r"(?:^|/)(?:test/(?:.*/)?[^/]+|test|test-[^/]*|[^/]*[._-]test)\.c?js$")
"""A ``.js``/``.cjs`` file node's runner runs when it searches a directory (node 18 and 20+ alike): under a
``test`` directory, or named ``test``, ``test-*``, ``*.test``, ``*-test``, ``*_test``."""
_JS_DEFINES = r"""\b(?:test|it)(?:\.\w+)?\s*\(\s*(['"`]){}\1"""
"""A ``test(name`` / ``it(name`` call (``test.skip``, ``it.only``...) naming the test: the file defines it."""


def _js_append(quoted: str, own: str, mark: str, source: str, mine: str, delimiter: str) -> str:
    """Lines appending the canaries (`source`, bound to names of their own, `mark` the first) to `quoted`
    unless they are there already (run again after the twins rewrite the file and after their compile check),
    when the file is CommonJS beyond doubt: it calls ``require(``, has no ``import``/``export`` statement
    and its nearest ``package.json`` does not say ``"type": "module"`` (an ``.mjs``-like file would throw
    at ``require`` and lose its own tests). Otherwise the canaries take a file of their own, `own` (`mine`,
    found by node's runner as before)."""
    pkg = (
        f'__swe_d=$(dirname {quoted}); while [ "$__swe_d" != . ] && [ "$__swe_d" != / ] && '
        f'[ ! -f "$__swe_d/package.json" ]; do __swe_d=$(dirname "$__swe_d"); done'
    )
    cjs = (
        f"case {quoted} in *.cjs) __swe_cjs=1 ;; *) __swe_cjs=0; grep -qsE "
        '\'"type"[[:space:]]*:[[:space:]]*"module"\' "$__swe_d/package.json" || __swe_cjs=1 ;; esac; '
        f"[ -f {quoted} ] && grep -qs 'require *(' {quoted} && "
        f"! grep -qsE '^[[:space:]]*(import|export)([[:space:]{{*]|$)' {quoted} || __swe_cjs=0"
    )
    append = _appended(quoted, source, delimiter)
    return "\n".join(
        [
            pkg,
            cjs,
            f'if [ "$__swe_cjs" = 1 ]; then if ! grep -qF {shlex.quote(mark)} {quoted}; then {append[0]}',
            *append[1:-1],
            f"{append[-1]}; fi",
            f"else [ -e {own} ] || cat > {own} <<'{delimiter}'",
            mine.rstrip("\n"),
            delimiter,
            "fi",
        ]
    )


def _rust_append(quoted: str, own: str, first: str, source: str, delimiter: str) -> str:
    """Lines appending the canaries to `quoted` unless its first canary is there already (run again after
    the twins rewrite the file and after their compile check): the size before, to cut them off after the
    run, and the file's modification time, put back. A package that declares a test target without
    libtest's harness (``harness = false``: its ``#[test]`` functions would not run) gets them in a file
    of their own, `own`, as any row whose test patch has no host file."""
    append = _appended(quoted, source, delimiter)
    return "\n".join(
        [
            f"if grep -qs 'harness *= *false' Cargo.toml; then [ -e {own} ] || cat > {own} <<'{delimiter}'",
            source.rstrip("\n"),
            delimiter,
            f"elif [ -f {quoted} ] && ! grep -q 'fn {first}()' {quoted}; then {append[0]}",
            *append[1:-1],
            f"{append[-1]}; fi",
        ]
    )


def _appended(quoted: str, source: str, delimiter: str) -> list[str]:
    """The lines that append `source` to `quoted`: its size before (to cut them off after the run) and its
    modification time, put back."""
    return [
        f"__swe_canary_size=$(wc -c < {quoted}); __swe_canary_mtime=$(stat -c %y {quoted} 2>/dev/null); "
        f"cat >> {quoted} <<'{delimiter}'",
        "",  # a file without a final newline still ends its last line
        source.rstrip("\n"),
        delimiter,
        f'touch -d "$__swe_canary_mtime" {quoted} 2>/dev/null',
    ]


def plant_language_canaries(
    plan: CanaryPlan,
    instance: TaskInstance,
    script: str,
    rng: random.Random | None = None,
    guard: str = "",
    found: list[str] | None = None,
) -> CanaryPlan:
    """`plan` (`plan_canaries` of `script`, the eval script: nonce markers in place) with the language's
    canaries planted; `guard` (Go): the path of the runner check's report (`runner.machinery`), whose
    check the canary file then carries ("" = none). `found`: test files the grader searched out holding
    the FAIL_TO_PASS tests of a row without test patch (an injected-bug task): a Go canary goes beside the
    first, else such a row would run with no canary and no runner check at all."""
    language = language_of(instance)
    if language is None or not plan.nonce or plan.canary_file:
        return plan
    rng = rng or random.SystemRandom()
    words = test_command(script)
    if refused := _refusal(language.name, words):
        return plan.model_copy(update={"skipped": refused})
    tests = patch_paths(instance.test_patch)
    w = rng.sample(_WORDS, 10)
    values = (rng.randint(2, 999), rng.randint(2, 999), rng.randint(2, 999), 0)
    values = (*values[:3], values[2] + rng.randint(1, 999))
    pre = host = own = ""
    if language.name == "go":
        beside = next((p for p in [*tests, *(found or [])] if p.endswith("_test.go")), "")
        if not beside:
            return plan.model_copy(update={"skipped": "the test patch has no *_test.go file"})
        names = [f"Test{w[2 * k].capitalize()}{w[2 * k + 1].capitalize()}" for k in range(4)]
        path = posixpath.join(posixpath.dirname(beside), f"zz_{w[8]}_{w[9]}_test.go")
        pre = f"sed -n 's/^package \\([A-Za-z0-9_]*\\).*/package \\1/p' {shlex.quote(beside)} | head -n1"
        reported = names
    elif language.name == "javascript":
        # Beside a test file of the test patch, else of the command (a row whose test patch is empty,
        # an injected-bug task, names the tree's tests); ``.cjs``: CommonJS even in a "type": "module"
        # package (its ``require`` would fail there as ``.js``, and with it the whole run).
        named = [word for word in words if word.endswith((".js", ".mjs", ".cjs"))]
        beside = next(
            (p for p in [*tests, *named] if ".test." in p or ".spec." in p or p.startswith("test")), ""
        )
        names = [f"{w[2 * k]} {w[2 * k + 1]}" for k in range(4)]
        own = posixpath.join(posixpath.dirname(beside) or "test", f"{w[8]}-{w[9]}.test.cjs")
        host = _js_host(instance, words)
        path = host or own
        reported = [f"- {n}" for n in names]
    else:
        names = [f"{w[2 * k]}_{w[2 * k + 1]}" for k in range(4)]
        host, own = _rust_host(instance), f"tests/{w[8]}_{w[9]}.rs"
        path = host or own
        reported = names
    prefix = f"swe{w[9].capitalize()}{rng.getrandbits(32):08x}" if guard and language.name == "go" else ""
    source = _source(language.name, names, values, (prefix, guard))
    quoted, delimiter = shlex.quote(path), f"EOF_SWE_CANARY_{rng.getrandbits(64):016x}"
    lines = plan.script.split("\n")
    hide = next(i for i, line in enumerate(lines) if line.startswith("__swe_self="))
    end = max(i for i, line in enumerate(lines) if END_TEST_OUTPUT in line)
    append = ""
    if host:
        # appended to a test file of the test patch (a test binary the run builds anyway, a test file
        # process node's runner starts anyway), right before the run: after the twins (which rewrite that
        # file) and the grader's files, never clobbered
        if language.name == "javascript":
            test = f"__swe_test_{rng.getrandbits(48):012x}"  # also the mark of lines already appended
            lines_of = _source(language.name, names, values, bound=(test, test.replace("test", "assert")))
            append = _js_append(quoted, shlex.quote(own), test, lines_of, source, delimiter)
        else:
            append = _rust_append(quoted, shlex.quote(own), names[0], source, delimiter)
        cut = (
            f'[ -n "${{__swe_canary_size:-}}" ] && {{ truncate -s "$__swe_canary_size" {quoted}; '
            f'touch -d "$__swe_canary_mtime" {quoted} 2>/dev/null; }}; rm -f {shlex.quote(own)}'
        )
        lines = [*lines[: hide + 1], append, *lines[hide + 1 : end], cut, *lines[end:]]
    else:
        write = [
            f"[ -e {quoted} ] || {{ {pre + ';' if pre else ''} cat <<'{delimiter}'",
            source.rstrip("\n"),
            delimiter,
            f"}} > {quoted}",
        ]
        lines = [*lines[:hide], *write, *lines[hide:end], f"rm -f {quoted}", *lines[end:]]
    if language.name == "javascript" and any(word.endswith((".js", ".mjs", ".cjs", ".ts")) for word in words):
        run = next(i for i, line in enumerate(lines) if line.lstrip().startswith("node "))
        lines[run] = f"{lines[run].rstrip()} {quoted}"  # the command names its files: name ours too
    split = go_command_env(words) if language.name == "go" else None
    return plan.model_copy(
        update={
            "command_env": split[0] if split is not None else "",
            "script": "\n".join(lines),
            "must_pass": reported[:2],
            "must_fail": reported[2:],
            "canary_file": path,
            "canary_source": source,
            "append_block": append,
            "skipped": "",
        }
    )
