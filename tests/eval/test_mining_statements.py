"""Problem statements of mined rows (issue 49, item 2): an issue from the failing tests, a model's behind
an OpenAI-compatible endpoint (the project's fake server, real HTTP), the commit's without how the task
was made, and the leak check that refuses any of them when it gives the fix away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_rl.eval.mining.history import Candidate, split_commit
from swe_rl.eval.mining.languages import LANGUAGES
from swe_rl.eval.mining.statements import (
    StatementSettings,
    error_lines,
    from_tests,
    leaks,
    split_provenance,
    write_statement,
)
from swe_rl.testing.fake_openai import ChatReply, FakeOpenAI
from tests.eval.mining_repos import make_python_repo

PY = LANGUAGES["python"]
ROOT = Path(__file__).resolve().parents[2]
BEFORE_LOG = """tests/test_calc.py .F
=================================== FAILURES ===================================
___________________________________ test_add ___________________________________
    def test_add():
        from calc import add
>       assert add(2, 3) == 5
E       assert -1 == 5
E        +  where -1 = <function add at 0x7f>(2, 3)
=========================== short test summary info ============================
PASSED tests/test_calc.py::test_mul
FAILED tests/test_calc.py::test_add - assert -1 == 5
"""
F2P, P2P = ["tests/test_calc.py::test_add"], ["tests/test_calc.py::test_mul"]


@pytest.fixture(scope="module")
def fix(tmp_path_factory) -> Candidate:
    repo = tmp_path_factory.mktemp("statements") / "calc"
    shas = make_python_repo(repo)
    cand = split_commit(repo, shas[1], PY)
    assert isinstance(cand, Candidate)
    return cand


GOLD = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1,3 +1,4 @@
 def frequencies(seq):
-    d = {}
+    d = collections.defaultdict(int)
+    tally_helper = d
     for item in seq:
"""


def test_the_leak_check_refuses_quoted_new_code_its_tokens_and_names_only_the_fix_has():
    assert leaks("frequencies() counts every value once too often", GOLD) == []
    assert leaks("Use `d = collections.defaultdict(int)` there", GOLD)[0].startswith("quotes an added line")
    # six tokens of the new line, reformatted: still the fix
    (why, *_) = leaks("try collections . defaultdict ( int )", GOLD)
    assert why.startswith("has 6 tokens of an added line")
    assert leaks("something like tally_helper is missing", GOLD) == [
        "names what only the fix adds: tally_helper"
    ]
    # a new name as code is a leak, the same word in prose is not
    gold = GOLD.replace("tally_helper", "current")
    assert leaks("On the current code, these tests fail", gold) == []
    assert leaks("set `current` first", gold) == ["names what only the fix adds: current"]
    # a name the tests use is told anyway; code that was there before is no leak
    assert leaks("tally_helper is missing", GOLD, known="+    assert tally_helper") == []
    assert leaks("in `def frequencies(seq):` ... for item in seq", GOLD) == []


def test_the_statement_from_the_tests_is_an_issue_without_the_fix(fix):
    text = from_tests(fix, PY, F2P, P2P, BEFORE_LOG)
    assert text.startswith("test_add fails in tests/test_calc.py\n")
    assert "- `tests/test_calc.py::test_add`" in text and "E       assert -1 == 5" in text
    assert "python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py" in text  # how to reproduce
    assert "assert add(2, 3) == 5" in text  # the new test's code: the agent does not have it
    assert "The failing tests pass, and the 1 test that passes today keeps passing." in text
    assert "a + b" not in text and leaks(text, fix.gold_patch, known=fix.test_patch) == []
    assert "SWE-smith" not in text and "mined" not in text


def test_log_lines_that_would_give_the_fix_away_are_left_out(fix):
    log = BEFORE_LOG + "E       hint: return a + b\n"
    assert "E       hint: return a + b" in error_lines(log)
    assert "return a + b" not in from_tests(fix, PY, F2P, P2P, log)
    # a new test whose code has the fix's line in it is not shown either
    quoting = Candidate(**{**fix.__dict__, "test_patch": "+def test_add():\n+    return a + b\n"})
    text = from_tests(quoting, PY, F2P, P2P, BEFORE_LOG)
    assert "`test_add` checks" not in text and "return a + b" not in text


def test_a_log_line_is_judged_as_the_statement_shows_it_in_a_fenced_block(fix):
    """A plain word of a log line (``'collections'``) is code once fenced: the whole statement is checked."""
    gold = Candidate(**{**fix.__dict__, "gold_patch": GOLD})
    line = "E       TypeError: unexpected keyword argument 'collections'"
    assert leaks(line, GOLD) == [] and leaks(f"```\n{line}\n```", GOLD) != []  # alone it passes
    text = from_tests(gold, PY, F2P, P2P, BEFORE_LOG + line + "\n")
    assert "collections" not in text and "E       assert -1 == 5" in text
    assert leaks(text, GOLD, known=fix.test_patch) == []


def test_the_commit_source_drops_how_the_task_was_made_and_keeps_it_as_provenance(fix):
    patch = (ROOT / "data/real_tasks/mutations/toolz-frequencies.patch").read_text()
    issue, how = split_provenance(patch.split("diff --git")[0])
    assert issue.startswith("frequencies() counts every value once too often") and "SWE-smith" not in issue
    assert how.startswith("(SWE-smith method:")
    text, source = write_statement(StatementSettings(source="commit"), fix, PY, F2P, P2P, BEFORE_LOG)
    assert (text, source) == ("Fix add: it subtracted\n\nadd(2, 3) returned -1.\n", "commit")
    leaking = Candidate(**{**fix.__dict__, "message": "Fix add: write `return a + b`"})
    text, source = write_statement(StatementSettings(source="commit"), leaking, PY, F2P, P2P, BEFORE_LOG)
    assert source.startswith("tests (commit refused: quotes an added line") and text.startswith(
        "test_add fails"
    )


def test_a_model_behind_an_openai_endpoint_writes_it_and_a_leaking_or_failing_model_falls_back(fix):
    issue = "add() subtracts\n\n`add(2, 3)` gives -1; it should give 5.\n"
    with FakeOpenAI(
        [issue, "Replace the body with `return a + b`.", ChatReply(status=500)], api_key="k"
    ) as srv:
        settings = StatementSettings(
            source="model", model_url=srv.base_url, model="m", api_key="k", timeout=30
        )
        assert write_statement(settings, fix, PY, F2P, P2P, BEFORE_LOG) == (issue, "model")
        sent = srv.requests[0]
        assert sent["model"] == "m" and "test_add" in sent["messages"][1]["content"]
        assert "a + b" not in json.dumps(sent)  # the gold patch is never shown to the model
        text, source = write_statement(settings, fix, PY, F2P, P2P, BEFORE_LOG)
        assert source.startswith("tests (model refused: quotes an added line") and "a + b" not in text
        text, source = write_statement(settings, fix, PY, F2P, P2P, BEFORE_LOG)
        assert source.startswith("tests (model failed:") and text.startswith("test_add fails")


def test_no_committed_row_says_how_it_was_made_or_leaks():
    for line in (ROOT / "data/real_tasks/instances.jsonl").read_text().splitlines():
        row = json.loads(line)
        statement = row["problem_statement"]
        assert "SWE-smith" not in statement and "injected" not in statement, row["instance_id"]
        known = row["test_patch"] + "\n" + "\n".join(row["FAIL_TO_PASS"])
        assert leaks(statement, row["patch"], known=known) == [], row["instance_id"]


def test_a_new_tests_code_is_its_own_definition_in_its_own_class():
    from swe_rl.eval.mining.statements import new_test_code

    patch = "+class A:\n+    def test_x(self):\n+        assert 1\n+\n+\n+class B:\n+    def test_x(self):\n+        assert 2\n+\n+    def test_y(self):\n+        pass\n"
    assert new_test_code(patch, "t.py::B::test_x") == ["    def test_x(self):", "        assert 2"]
    assert new_test_code(patch, "t.py::A::test_x") == ["    def test_x(self):", "        assert 1"]
    js = "+test('adds', () => {\n+  assert.equal(add(1, 2), 3);\n+});\n+test('other', () => {});\n"
    assert new_test_code(js, "adds") == ["test('adds', () => {", "  assert.equal(add(1, 2), 3);", "});"]
    assert new_test_code(patch, "t.py::test_missing") == []
