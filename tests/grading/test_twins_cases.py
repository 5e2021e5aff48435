"""A twin keeps a few of its original's parameter sets (`swe_rl.grading.twins.cases`): drawn at random per
grading, written in the file's own terms, run for real by pytest (honest code fails every twin case; a
result equal to anything passes them), and every form the cut cannot follow keeps all its cases."""

from __future__ import annotations

import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl.grading.twins.cases import MAX_CASES
from swe_rl.grading.twins.python import FileNames, derive_python_twin

NAMES = FileNames("_Kind", "_sent", "_TwinError", "_Null")
ROWS = ", ".join(f"({i}, {i * 2})" for i in range(12))
LITERAL = f"""import pytest
from pkg import double


@pytest.mark.parametrize(("n", "expected"), [{ROWS}])
def test_double(n, expected):
    assert double(n) == expected
"""
TABLE = f"""import pytest
from pkg import double

CASES = (
    {ROWS},
)


@pytest.mark.parametrize("n, expected", CASES)
def test_double(n, expected):
    assert double(n) == expected
"""


def _twin(source: str, seed: int):
    twin = derive_python_twin(source, "test_double", set(), NAMES, random.Random(seed))
    assert not isinstance(twin, str), twin
    return twin


def _planted(source: str, seed: int) -> str:
    twin = _twin(source, seed)
    data = source.encode()
    support = (
        "class _Kind(object):\n    __slots__ = ()\n\n    def __eq__(self, other):\n"
        "        return True if other is self else NotImplemented\n\n    __hash__ = object.__hash__\n\n\n"
        "_sent = _Kind()\n\n\n"
    )
    return support + (data[: twin.offset] + twin.code.encode() + data[twin.offset :]).decode()


def _cases(code: str) -> ast.expr:
    func = next(n for n in ast.walk(ast.parse(code.strip())) if isinstance(n, ast.FunctionDef))
    call = func.decorator_list[0]
    assert isinstance(call, ast.Call)
    return call.args[1]


@pytest.mark.parametrize("source", [LITERAL, TABLE], ids=["literal", "table"])
def test_a_twin_keeps_a_few_of_its_cases_drawn_anew_per_grading(source):
    rows = [(i, i * 2) for i in range(12)]
    seen = set()
    for seed in range(12):
        cases = _cases(_twin(source, seed).code)
        if isinstance(cases, ast.Subscript):  # the table: a slice of it, in bounds
            assert isinstance(cases.value, ast.Name) and cases.value.id == "CASES"
            got = rows[ast.literal_eval(cases.slice.lower) : ast.literal_eval(cases.slice.upper)]
        else:  # a literal: a literal list of the chosen rows, in the file's order
            got = ast.literal_eval(cases)
            assert isinstance(cases, ast.List) and got == sorted(got)
        assert len(got) == MAX_CASES and set(got) <= set(rows)
        seen.add(tuple(got))
    assert len(seen) > 3  # drawn at random per grading, not always the same cases


@pytest.mark.parametrize("source", [LITERAL, TABLE], ids=["literal", "table"])
@pytest.mark.parametrize(("code", "failed", "passed"), [
    ("def double(n):\n    return n * 2\n", MAX_CASES, 12),
    ("class _Any:\n    def __eq__(self, other):\n        return True\n\n\ndef double(n):\n    return _Any()\n",
     0, 12 + MAX_CASES),
], ids=["honest", "always-equal"])  # fmt: skip
def test_pytest_runs_the_cut_twin_honest_code_fails_every_case_an_always_equal_result_passes(
    tmp_path: Path, source: str, code: str, failed: int, passed: int
):
    (tmp_path / "pkg.py").write_text(code)
    (tmp_path / "test_double.py").write_text(_planted(source, seed=3))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_double.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    summary = res.stdout.strip().splitlines()[-1]
    expected = (f"{failed} failed, " if failed else "") + f"{passed} passed"
    assert summary.startswith(expected), res.stdout[-2000:]


@pytest.mark.parametrize("decorator", [
    "@pytest.mark.parametrize('n', [1, 2, 3, 4, 5, 6], ids=['a', 'b', 'c', 'd', 'e', 'f'])",  # a list of ids
    "@pytest.mark.parametrize('n', IDS_TABLE, ids=IDS)",  # ids from a table
    "@pytest.mark.parametrize('n', [1, 2, 3, 4, 5, 6], ids=OTHER_IDS)",  # a name from elsewhere: maybe a list
    "@pytest.mark.parametrize('n', [1, 2, 3, 4, 5, 6], ids=ids.made)",
    "@pytest.mark.parametrize('n', [*range(9)])",  # starred
    "@pytest.mark.parametrize('n', list(range(9)))",  # a call
    "@pytest.mark.parametrize('n', [1, 2, 3])",  # no more than the cap
])  # fmt: skip
def test_every_form_the_cut_cannot_follow_keeps_all_its_cases(decorator):
    source = (
        "import pytest\n\nIDS = ['a', 'b', 'c', 'd', 'e', 'f']\nIDS_TABLE = [1, 2, 3, 4, 5, 6]\n\n\n"
        f"{decorator}\ndef test_double(n):\n    assert double(n) == 2 * n\n"
    )
    twin = _twin(source, 1)
    assert decorator.split(", ids")[0].split("(", 1)[1] in twin.code


@pytest.mark.parametrize("ids", ["str", "idfn", "lambda v: str(v)"])
def test_ids_given_by_a_function_do_not_stop_the_cut(ids):
    source = "def idfn(v):\n    return str(v)\n\n\n" + LITERAL.replace(
        '@pytest.mark.parametrize(("n", "expected"), [',
        f'@pytest.mark.parametrize(("n", "expected"), ids={ids}, argvalues=[',
    )
    decorator = ast.parse(_twin(source, 2).code.strip()).body[0].decorator_list[0]
    assert len(ast.literal_eval(decorator.keywords[1].value)) == MAX_CASES
