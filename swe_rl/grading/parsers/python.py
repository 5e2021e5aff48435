"""Python runners: pytest ``-rA`` summaries (plain, option-trimmed, v2), Django, sympy, seaborn, matplotlib.

Same results as swebench 5.x's functions of the same names. pytest's summary line is
``STATUS test_id [- reason]``; the plain parser keeps the second word as the id (ids with
spaces are cut at the first one, as SWE-bench's test lists are), v2 keeps every word up to the
reason. ``SKIPPED [N] file:line: reason`` is pytest's count of skips, not a test, so it is dropped.
"""

from __future__ import annotations

import re

from swe_rl.grading.parsers.registry import ERROR, FAILED, PASSED, SKIPPED, STATUSES, register

__all__ = [
    "parse_log_django",
    "parse_log_matplotlib",
    "parse_log_pytest",
    "parse_log_pytest_options",
    "parse_log_pytest_v2",
    "parse_log_seaborn",
    "parse_log_sympy",
]

_SKIP_COUNT = re.compile(r"^\[\d+\]$")


def _is_skip_count(status: str, name: str) -> bool:
    return status == SKIPPED and _SKIP_COUNT.match(name) is not None


def _summary_words(line: str) -> list[str] | None:
    """The words of a ``STATUS id`` summary line (a failure's `` - `` separators blanked)."""
    if not line.startswith(STATUSES):
        return None
    if line.startswith(FAILED):
        line = line.replace(" - ", " ")
    words = line.split()
    if len(words) <= 1 or _is_skip_count(words[0], words[1]):
        return None
    return words


@register("parse_log_pytest", "parse_log_astroid", "parse_log_flask", "parse_log_marshmallow",
          "parse_log_pvlib", "parse_log_pyvista", "parse_log_sqlfluff", "parse_log_xarray")  # fmt: skip
def parse_log_pytest(log: str) -> dict[str, str]:
    """``pytest -rA``: the id is the second word; a later line for a test wins."""
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = _summary_words(line)
        if words:
            out[words[1]] = words[0]
    return out


_OPTION = re.compile(r"(.*?)\[(.*)\]")


@register("parse_log_pytest_options", "parse_log_pydicom", "parse_log_requests", "parse_log_pylint")
def parse_log_pytest_options(log: str) -> dict[str, str]:
    """As `parse_log_pytest`, with a parameter that is an absolute path cut to its last part."""
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = _summary_words(line)
        if not words:
            continue
        name = words[1]
        found = _OPTION.search(name)
        if found:
            main, option = found.groups()
            if option.startswith("/") and not option.startswith("//") and "*" not in option:
                option = "/" + option.split("/")[-1]
            name = f"{main}[{option}]"
        out[name] = words[0]
    return out


_ESCAPES = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))
_COLOUR = re.compile(r"\[(\d+)m")


@register("parse_log_pytest_v2", "parse_log_astropy", "parse_log_scikit", "parse_log_sphinx")
def parse_log_pytest_v2(log: str) -> dict[str, str]:
    """Later pytest: colours and control characters removed, ids keep their spaces.

    A failure's reason (after the first `` - ``) is dropped; a line ending in a status
    (older pytest's ``id STATUS``) counts too.
    """
    out: dict[str, str] = {}
    for raw in log.split("\n"):
        line = _COLOUR.sub("", raw).translate(_ESCAPES)
        if line.startswith(STATUSES):
            if line.startswith(FAILED):
                line = line.split(" - ", 1)[0]
            words = line.split()
            if len(words) >= 2 and not _is_skip_count(words[0], words[1]):
                out[" ".join(words[1:])] = words[0]
        elif line.endswith(STATUSES):
            words = line.split()
            if len(words) >= 2:
                out[" ".join(words[:-1])] = words[-1]
    return out


@register("parse_log_matplotlib")
def parse_log_matplotlib(log: str) -> dict[str, str]:
    """As `parse_log_pytest`, with mouse-button enum names written as their numbers."""
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = _summary_words(line.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"))
        if words:
            out[words[1]] = words[0]
    return out


@register("parse_log_seaborn")
def parse_log_seaborn(log: str) -> dict[str, str]:
    """seaborn's runs print ``FAILED id``, ``PASSED id`` or ``id PASSED ...``."""
    out: dict[str, str] = {}
    for line in log.split("\n"):
        words = line.split()
        if len(words) < 2:
            continue
        if line.startswith(FAILED):
            out[words[1]] = FAILED
        elif f" {PASSED} " in line:
            if words[1] == PASSED:
                out[words[0]] = PASSED
        elif line.startswith(PASSED):
            out[words[1]] = PASSED
    return out


_SYMPY_HEADER = re.compile(r"(_*) (.*)\.py:(.*) (_*)")


@register("parse_log_sympy")
def parse_log_sympy(log: str) -> dict[str, str]:
    """sympy's ``bin/test``: ``test_x ok`` / `` F`` / `` E`` lines and ``___ file.py:test ___`` headers."""
    out: dict[str, str] = {}
    for found in _SYMPY_HEADER.findall(log):
        out[f"{found[1]}.py:{found[2]}"] = FAILED
    for line in log.split("\n"):
        line = line.strip()
        if not line.startswith("test_"):
            continue
        for suffix, status in ((" E", ERROR), (" F", FAILED), (" ok", PASSED)):
            if line.endswith(suffix):
                out[line.split()[0]] = status
    return out


_DJANGO_PASS = (" ... ok", " ... OK", " ...  OK")
_DJANGO_SPLIT_OK = [
    re.compile(p, re.MULTILINE)
    for p in (
        r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$",
        r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$",
        r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
    )
]
# django__django-7188 prints a migration line and the test on one line.
_DJANGO_7188 = "Applying sites.0002_alter_domain_unique...test_no_migrations"


@register("parse_log_django")
def parse_log_django(log: str) -> dict[str, str]:
    """Django's ``runtests.py --verbosity 2``: ``name ... ok|skipped|FAIL|ERROR``, ``FAIL: name``.

    An ``ok`` on its own line closes the last ``name ...`` line (the test printed in between),
    and three known interleavings of Django's own output with a result are read whole.
    """
    out: dict[str, str] = {}
    last: str | None = None
    for line in log.split("\n"):
        line = line.strip()
        if "--version is equivalent to version" in line:
            out["--version is equivalent to version"] = PASSED
        if " ... " in line:
            last = line.split(" ... ")[0]
        for suffix in _DJANGO_PASS:
            if line.endswith(suffix):
                if line.startswith(_DJANGO_7188):
                    line = line.split("...", 1)[-1].strip()
                out[line.rsplit(suffix, 1)[0]] = PASSED
                break
        if " ... skipped" in line:
            out[line.split(" ... skipped")[0]] = SKIPPED
        if line.endswith(" ... FAIL"):
            out[line.split(" ... FAIL")[0]] = FAILED
        if line.startswith("FAIL:"):
            out[line.split()[1].strip()] = FAILED
        if line.endswith(" ... ERROR"):
            out[line.split(" ... ERROR")[0]] = ERROR
        if line.startswith("ERROR:"):
            out[line.split()[1].strip()] = ERROR
        if line.lstrip().startswith("ok") and last is not None:
            out[last] = PASSED
    for pattern in _DJANGO_SPLIT_OK:
        for found in pattern.finditer(log):
            out[found.group(1)] = PASSED
    return out
