"""How an instance's test log is read: its swebench 5.x ``log_parser`` and ``eval_type``.

swebench 5.x reads both from the row. Rows of the older schema (SWE-bench before 5.x, SWE-Gym,
our fixtures) do not carry them, so they are derived here from the repo, as swebench 4.1.0 did
from its per-repo tables: the Python repos of SWE-bench by name, any other Python repo
``parse_log_pytest``. A row that says it is in another language and names no parser gets none
(`NoLogParser`): reading a Go or JavaScript log with the pytest parser would grade it wrongly;
``swe-convert-rows`` fills the field (docs/grading.md, "Rows").
"""

from __future__ import annotations

import re

from swe_rl.tasks.instance import TaskInstance

__all__ = ["FAIL_ONLY_REPOS", "PASS_AND_FAIL", "FAIL_ONLY", "REPO_LOG_PARSERS", "NoLogParser",
           "eval_type_for", "log_parser_for"]  # fmt: skip

PASS_AND_FAIL, FAIL_ONLY = "pass_and_fail", "fail_only"

_SHORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

REPO_LOG_PARSERS: dict[str, str] = {
    "astropy/astropy": "parse_log_astropy",
    "django/django": "parse_log_django",
    "marshmallow-code/marshmallow": "parse_log_marshmallow",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "pallets/flask": "parse_log_flask",
    "psf/requests": "parse_log_requests",
    "pvlib/pvlib-python": "parse_log_pvlib",
    "pydata/xarray": "parse_log_xarray",
    "pydicom/pydicom": "parse_log_pydicom",
    "pylint-dev/astroid": "parse_log_astroid",
    "pylint-dev/pylint": "parse_log_pylint",
    "pytest-dev/pytest": "parse_log_pytest",
    "pyvista/pyvista": "parse_log_pyvista",
    "scikit-learn/scikit-learn": "parse_log_scikit",
    "sqlfluff/sqlfluff": "parse_log_sqlfluff",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "sympy/sympy": "parse_log_sympy",
}
"""Repo -> parser name for rows that do not name one (SWE-bench's Python repos; other
languages' helpers add theirs)."""

FAIL_ONLY_REPOS = frozenset(
    {"chartjs/Chart.js", "processing/p5.js", "markedjs/marked", "bpmn-io/bpmn-js",
     "openlayers/openlayers", "eslint/eslint"}
)  # fmt: skip
"""Repos whose parser records failures only (swebench 5.x's list): graded ``fail_only``."""


class NoLogParser(LookupError):
    """The row names no log parser and its repo has no default one."""


def log_parser_for(instance: TaskInstance) -> str:
    """The row's ``log_parser`` (a short ``pytest`` / ``cargo`` gets 5.x's ``parse_log_`` prefix), else
    the repo's, else ``parse_log_pytest`` for a Python row."""
    if instance.log_parser.startswith("parse_log_"):
        return instance.log_parser
    if _SHORT_NAME.fullmatch(instance.log_parser):  # a dataset's short name: "pytest", "cargo"
        return f"parse_log_{instance.log_parser}"
    if instance.repo in REPO_LOG_PARSERS:
        return REPO_LOG_PARSERS[instance.repo]
    language = str(instance.extra.get("language") or "python").lower()
    if language in ("python", "py"):
        return "parse_log_pytest"
    named = (
        f"names log parser {(instance.log_parser.strip().splitlines() or [''])[0][:40]!r}, not swebench's"
        if instance.log_parser
        else "names no log_parser"
    )
    raise NoLogParser(
        f"{instance.instance_id}: the row {named} and {instance.repo} is in {language}; "
        "set a swebench 5.x parser name (swe-convert-rows) rather than read its log as pytest's"
    )


def eval_type_for(instance: TaskInstance) -> str:
    """The row's ``eval_type``, else ``fail_only`` for the repos whose parser sees failures only."""
    if instance.eval_type:
        return instance.eval_type
    return FAIL_ONLY if instance.repo in FAIL_ONLY_REPOS else PASS_AND_FAIL
