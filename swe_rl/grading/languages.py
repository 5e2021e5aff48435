"""The languages graded besides Python: which parser reads their logs, which files are their tests.

One row per language in `LANGUAGES`. A row of a dataset names its parser (``log_parser``, swebench
5.x's name); a name listed here is read by `swe_rl.grading.parsers` whatever the repo, so a Go, Rust or
JavaScript log never reaches the pytest parser. The tree rules of each language (test files, runner
configuration, start-up hooks) are in `swe_rl.grading.scans.tree_languages`, driven by the same table.
Adding a language: one parser module in `swe_rl.grading.parsers`, one `Language` here, its manifest
comparison (if any) in `language_rules`, a fixture under ``data/fixtures/multilang/`` (docs/grading.md).
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict

from swe_rl.grading.canaries.log_audit import NonceSection, nonce_section
from swe_rl.grading.integrity import TamperRecord
from swe_rl.grading.parsers import PARSERS, Parser
from swe_rl.tasks import TaskInstance
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

__all__ = [
    "LANGUAGES",
    "Language",
    "contradiction_records",
    "go_command_env",
    "test_command",
    "language_contradictions",
    "language_of",
    "row_parser",
    "section_statuses",
]


class Language(BaseModel):
    """What grading knows of one language."""

    model_config = ConfigDict(frozen=True)

    name: str
    """As rows name it in ``repo_language`` (lower case)."""
    parsers: tuple[str, ...]
    """swebench 5.x parser names of its test runners (all registered in `swe_rl.grading.parsers`)."""
    test_files: tuple[str, ...]
    """fnmatch patterns on a file's (normalised) base name: test sources wherever they are."""
    test_dirs: tuple[str, ...]
    """Directory names whose files are test material wherever they are."""
    hook_files: tuple[str, ...]
    """fnmatch patterns on base names: runner configuration and start-up hooks, dropped whole."""
    hook_dirs: tuple[str, ...] = ()
    """Directory names whose files configure the build or the runner (``.cargo/config.toml``), dropped."""
    dependency_dirs: tuple[str, ...] = ()
    """Directories of vendored dependency code (the test runner's own code included), dropped unless the
    gold patch touches the same file."""
    manifests: tuple[str, ...] = ()
    """Base names whose runner settings `language_rules` compares before and after (parsed)."""


LANGUAGES: tuple[Language, ...] = (
    Language(
        name="go",
        parsers=("parse_log_gotest",),
        test_files=("*_test.go",),
        test_dirs=("testdata",),
        hook_files=("go.work", "go.work.sum"),
        dependency_dirs=("vendor",),
        manifests=("go.mod",),
    ),
    Language(
        name="javascript",
        parsers=(
            "parse_log_tap", "parse_log_jest", "parse_log_jest_json", "parse_log_vitest",
            "parse_log_karma",
        ),
        test_files=tuple(
            f"*.{kind}.{ext}" for kind in ("test", "spec") for ext in ("js", "jsx", "ts", "tsx", "mjs", "cjs", "mts", "cts")
        ) + ("*.snap",),
        test_dirs=("__tests__", "__mocks__", "__snapshots__", "__fixtures__"),
        hook_files=(
            "jest.config.*", "jest.setup.*", "vitest.config.*", "vitest.workspace.*", "vitest.setup.*",
            "vite.config.*", ".mocharc*", "karma.conf.*", "ava.config.*", ".babelrc*", "babel.config.*",
            ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnp.cjs", ".pnp.loader.mjs", ".nycrc*", ".c8rc*",
            ".taprc", "tap.config.*", ".node-options",
        ),
        dependency_dirs=("node_modules",),
        manifests=("package.json",),
    ),
    Language(
        name="rust",
        parsers=("parse_log_cargo",),
        test_files=("tests.rs", "*_tests.rs", "test_*.rs"),
        test_dirs=("tests",),
        hook_files=("build.rs", "rust-toolchain", "rust-toolchain.toml"),
        hook_dirs=(".cargo",),
        dependency_dirs=("vendor",),
        manifests=("cargo.toml",),
    ),
)  # fmt: skip

_BY_PARSER = {p: lang for lang in LANGUAGES for p in lang.parsers}
_BY_NAME = {lang.name: lang for lang in LANGUAGES} | {
    "typescript": LANGUAGES[1],
    "js": LANGUAGES[1],
    "ts": LANGUAGES[1],
}


def _parser_name(instance: TaskInstance) -> str:
    name = getattr(instance, "log_parser", None) or instance.extra.get("log_parser")
    return name if isinstance(name, str) else ""


def language_of(instance: TaskInstance) -> Language | None:
    """The instance's language when it is one of `LANGUAGES` (by its parser, else its ``repo_language``)."""
    by_parser = _BY_PARSER.get(_parser_name(instance))
    if by_parser is not None:
        return by_parser
    named = instance.extra.get("repo_language") or instance.extra.get("language")
    return _BY_NAME.get(named.lower()) if isinstance(named, str) else None


def row_parser(instance: TaskInstance) -> tuple[str, Parser] | None:
    """(name, parser) when the row names a parser of a language of this table, else None (Python's path)."""
    name = _parser_name(instance)
    if name in _BY_PARSER and name in PARSERS:
        return name, PARSERS[name]
    return None


def language_contradictions(instance: TaskInstance, log: str, tests: set[str]) -> set[str]:
    """Expected tests the log reports with more than one status, line by line with the row's parser.

    The parsers read the last line of a test; a line printed by the code under test (a panic message, a
    ``println!``, a ``fmt.Println`` of ``--- PASS: TestX (0.00s)``) after the runner's own would flip
    it. Strict grading fails such a test whichever line came last, as `strict_verdict.contradicted_tests`
    does for pytest."""
    named = row_parser(instance)
    if named is None or not tests:
        return set()
    parse = named[1]
    seen: dict[str, set[str]] = {}
    for line in log.split("\n"):
        for test, status in parse(line).items():
            if test in tests:
                seen.setdefault(test, set()).add(status)
    return {t for t, statuses in seen.items() if len(statuses) > 1}


def _section(log: str, nonce: str) -> str:
    if not nonce:
        return log
    found = nonce_section(log, nonce)
    return found.text if isinstance(found, NonceSection) else ""


def section_statuses(instance: TaskInstance, log: str, nonce: str = "") -> dict[str, str]:
    """The row parser's reading of the run's (nonce-marked) section; {} for rows outside `LANGUAGES`.

    The canary check needs it where grading parsed nothing (all of the patch dropped: no_patch)."""
    named = row_parser(instance)
    return named[1](_section(log, nonce)) if named is not None else {}


def contradiction_records(instance: TaskInstance, log: str, nonce: str = "") -> list[TamperRecord]:
    """The integrity report's record of `language_contradictions` in the run's (nonce-marked) section."""
    bad = language_contradictions(
        instance, _section(log, nonce), {*instance.fail_to_pass, *instance.pass_to_pass}
    )
    if not bad:
        return []
    return [
        TamperRecord(
            path=", ".join(sorted(bad)[:5]),
            rule="contradicted_result",
            action="flagged",
            reason="the log reports these expected tests twice with different results (a printed result line)",
        )
    ]


_FILE_WRITE = re.compile(r"""^\s*cat\s*>\s*/tmp/[\w./-]+\s*<<-?\s*(['"]?)(\w+)\1\s*$""")
"""A heredoc that writes a file under /tmp before the test command (the mined mocha rows' shim of
mocha's global names for node's runner): set-up, not part of the command."""


def test_command(script: str) -> list[str]:
    """The words between the eval script's test-output markers ([] without one pair, ["?"] unparsable),
    without the heredoc file writes of `_FILE_WRITE` before them."""
    lines = script.split("\n")
    starts = [i for i, line in enumerate(lines) if START_TEST_OUTPUT in line]
    ends = [i for i, line in enumerate(lines) if END_TEST_OUTPUT in line]
    if len(starts) != 1 or not ends or ends[-1] <= starts[0]:
        return []
    words: list[str] = []
    body = lines[starts[0] + 1 : ends[-1]]
    at = 0
    while at < len(body):
        write = _FILE_WRITE.match(body[at]) if not words else None
        if write is not None and write.group(2) in body[at + 1 :]:
            at = body.index(write.group(2), at + 1) + 1
            continue
        try:
            words += shlex.split(body[at], comments=True)
        except ValueError:
            return ["?"]
        at += 1
    return words


_GO_ENV = {
    "GO111MODULE": ("on", "off", "auto"),
    "CGO_ENABLED": ("0", "1"),
    "GOFLAGS": ("-mod=mod", "-mod=vendor", "-mod=readonly"),
}
"""Assignments a row's ``go test`` command may start with and still be a plain run of every test (GOPATH
mode for code from before ``go.mod``, cgo on or off, the module mode): GOFLAGS only with these flags
(``-run``, ``-skip``, ``-failfast`` there would select or stop tests, and the canaries with them)."""


def go_command_env(words: list[str]) -> tuple[str, list[str]] | None:
    """(the leading ``NAME=VALUE`` words of a test command as a shell prefix, the command after them);
    None when one of them is not in `_GO_ENV`. The grader's own ``go`` commands of the run (the probe's
    queries, the twins' compile check) take the same prefix, so they see the package as the tests do."""
    at = 0
    while at < len(words) and "=" in words[at] and words[at].split("=", 1)[0].isidentifier():
        name, value = words[at].split("=", 1)
        if name not in _GO_ENV or any(flag not in _GO_ENV[name] for flag in value.split() or [""]):
            return None
        at += 1
    prefix = "".join(f"{shlex.quote(word)} " for word in words[:at])
    return prefix, words[at:]
