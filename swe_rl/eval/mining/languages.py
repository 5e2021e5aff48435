"""Languages the miner knows: how to tell one from a repository's files, build it and run its tests.

Each language names a toolchain image (Debian's own packages on the offline base image, built by
``data/build_multilang_images.sh``; Python needs none beyond the base image), a test command run
from the repository's top, a warm-up run at image build (compile once, so the test runs need no
network), the parser registered under swebench 5.x's name for that runner's log, and a rule for
which paths are tests. The test rule decides how a commit is split: files it accepts go to the test
patch, every other file of a known source extension to the gold patch.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["LANGUAGES", "RepoLanguage", "UnknownLanguage", "detect_language"]


class UnknownLanguage(LookupError):
    """No language of `LANGUAGES` matches the repository's files."""


@dataclass(frozen=True)
class RepoLanguage:
    """How one language's repositories are built and tested."""

    name: str
    """``python``, ``go``, ``javascript``, ``rust``."""
    markers: tuple[str, ...]
    """Files at the repository's top that say the repository is in this language."""
    image: str
    """Image the task image is built FROM."""
    test_command: str
    """Run from the repository's top, printing the log the parser reads; ``{tests}`` becomes the test
    files of the commit (SWE-bench runs those; the grader's canaries need a command that names them)."""
    warm: str
    """Shell run once at image build (compiles, caches); must need no network."""
    log_parser: str
    """swebench 5.x's parser name; the project registers a parser of that name."""
    source_suffixes: tuple[str, ...]
    """Extensions of the files a gold patch may change (others: docs, changelogs, are left out)."""
    test_pattern: str
    """Regular expression on the path (POSIX, from the top) of a test file."""

    def command_for(self, test_files: list[str]) -> str:
        """The test command for a commit whose (remaining) test files are ``test_files``."""
        return self.test_command.replace("{tests}", " ".join(shlex.quote(f) for f in test_files)).strip()

    def is_test(self, path: str) -> bool:
        return re.search(self.test_pattern, path) is not None

    def is_source(self, path: str) -> bool:
        return PurePosixPath(path).suffix in self.source_suffixes and not self.is_test(path)


BASE_IMAGE = "swe-rl/base:bookworm"

LANGUAGES: dict[str, RepoLanguage] = {
    lang.name: lang
    for lang in (
        RepoLanguage(
            name="rust", markers=("Cargo.toml",), image="swe-rl/toolchain-rust:bookworm",
            test_command="cargo test --offline --no-fail-fast -- --test-threads=1",
            warm="cargo test --offline --no-run >/dev/null 2>&1 || true", log_parser="parse_log_cargo",
            source_suffixes=(".rs",), test_pattern=r"(^|/)tests/.*\.rs$",
        ),
        RepoLanguage(
            name="go", markers=("go.mod",), image="swe-rl/toolchain-go:bookworm",
            test_command="go test -v -count=1 ./...", warm="go test -count=1 -run '^$' ./... >/dev/null || true",
            log_parser="parse_log_gotest", source_suffixes=(".go",), test_pattern=r"_test\.go$",
        ),
        RepoLanguage(
            name="javascript", markers=("package.json",), image="swe-rl/toolchain-node:bookworm",
            test_command="node --test --test-reporter=tap {tests}", warm="true", log_parser="parse_log_tap",
            source_suffixes=(".js", ".mjs", ".cjs"),
            test_pattern=r"(^|/)(test|tests|__tests__)/|\.(test|spec)\.[cm]?js$",
        ),
        RepoLanguage(
            name="python", markers=("pyproject.toml", "setup.py", "setup.cfg"), image=BASE_IMAGE,
            test_command="python3 -m pytest -rA -p no:cacheprovider {tests}", warm="true", log_parser="parse_log_pytest",
            source_suffixes=(".py",), test_pattern=r"(^|/)(tests?/.*\.py|test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$",
        ),
    )
}  # fmt: skip
"""Checked in this order: a Rust crate with a package.json for its docs is still Rust."""


def detect_language(top_level_files: list[str] | set[str] | Path) -> RepoLanguage:
    """The first language of `LANGUAGES` whose marker file is at the repository's top."""
    if isinstance(top_level_files, Path):
        names = {p.name for p in top_level_files.iterdir()}
    else:
        names = set(top_level_files)
    for lang in LANGUAGES.values():
        if any(m in names for m in lang.markers):
            return lang
    raise UnknownLanguage(f"no marker of a known language at the top ({', '.join(sorted(names)[:10])})")
