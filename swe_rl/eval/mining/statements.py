"""Problem statements for mined rows: an issue an agent can act on, which does not give the fix away.

A statement is written as an issue: what goes wrong (the failing tests and what they print), how to
see it (the test command; a new test's code, from the test patch, which the agent does not have),
and what is expected (those tests pass, the passing ones keep passing). Three sources, in the order
tried (``swe-mine-tasks --statement``):

- ``model``: a model behind any OpenAI-compatible endpoint writes it from the same facts (never from
  the gold patch);
- ``commit``: the commit's message (a history of injected bugs carries an issue there), without
  paragraphs about how the task was made (`provenance_removed`);
- ``tests``: written here from the failing tests and the log of the run before the fix
  (deterministic; the fallback of the other two).

Every statement goes through `leaks`: it is refused when it quotes the gold patch's added code or
names what only the fix introduces (precise rules in `leaks`). A model's or commit's statement that
leaks or cannot be had falls back to ``tests``; the lines of the log that leak are left out of it.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from swe_rl.eval.mining.history import Candidate
from swe_rl.eval.mining.languages import RepoLanguage

__all__ = [
    "LEAK_NGRAM",
    "StatementSettings",
    "from_model",
    "from_tests",
    "leaks",
    "provenance_removed",
    "split_provenance",
    "write_statement",
]

LEAK_NGRAM = 6
"""A run of this many code tokens of an added line, found in the statement, is a leak."""
MIN_QUOTED_LINE = 12
"""An added line (stripped) of at least this many characters, found verbatim, is a leak."""
SOURCES = ("tests", "commit", "model")

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|[^\sA-Za-z0-9_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_ERROR_LINE = re.compile(
    r"^(FAILED |ERROR |E {3})"  # pytest's summary and assertion lines
    r"|^\s+\S+_test\.go:\d+: "  # go test
    r"|^\s+(error|expected|actual|message|failureType):"  # TAP's YAML block (node --test)
    r"|panicked at|^\s*(left|right): |assertion( `left == right`)? failed"  # cargo test
)
_PROVENANCE = re.compile(r"^\((SWE-smith method|the bug was injected|this task was)", re.IGNORECASE)


@dataclass(frozen=True)
class StatementSettings:
    """Where statements come from (``--statement``, ``--statement-model-*``)."""

    source: str = "tests"
    model_url: str | None = None
    """Base URL of an OpenAI-compatible API (``.../v1``); needed by ``model``."""
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout: float = 120.0


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _patch_lines(patch: str, mark: str) -> list[str]:
    return [
        line[1:]
        for line in patch.splitlines()
        if line.startswith(mark) and not line.startswith(("+++ ", "--- "))
    ]


def leaks(statement: str, gold_patch: str, *, known: str = "") -> list[str]:
    """Why ``statement`` gives the fix away (empty: it does not).

    The gold patch's *new code* is each added line that is not also a removed line (stripped). A
    statement leaks when it contains (1) such a line verbatim, when it is at least
    `MIN_QUOTED_LINE` characters, (2) a run of `LEAK_NGRAM` consecutive tokens of such a line
    (identifiers, numbers, single punctuation characters) that no removed or context line of the
    patch has, or (3) names as code (`code_names`) an identifier (3+ characters) that appears in
    added lines only: not in the patch's removed or context lines, nor in ``known`` (the test patch,
    the test names: what the agent is told anyway).
    """
    removed = {s.strip() for s in _patch_lines(gold_patch, "-")}
    context = _patch_lines(gold_patch, " ")
    new = [ln for ln in _patch_lines(gold_patch, "+") if ln.strip() and ln.strip() not in removed]
    old_text = "\n".join([*removed, *context])
    reasons = []
    for line in new:
        if len(line.strip()) >= MIN_QUOTED_LINE and line.strip() in statement:
            reasons.append(f"quotes an added line: {line.strip()[:80]!r}")
    said = _tokens(statement)
    said_grams = {tuple(said[i : i + LEAK_NGRAM]) for i in range(len(said) - LEAK_NGRAM + 1)}
    old = _tokens(old_text)
    old_grams = {tuple(old[i : i + LEAK_NGRAM]) for i in range(len(old) - LEAK_NGRAM + 1)}
    for line in new:
        toks = _tokens(line)
        for i in range(len(toks) - LEAK_NGRAM + 1):
            gram = tuple(toks[i : i + LEAK_NGRAM])
            if gram in said_grams and gram not in old_grams:
                reasons.append(f"has {LEAK_NGRAM} tokens of an added line: {' '.join(gram)!r}")
                break
    only_new = set(_IDENT.findall("\n".join(new))) - set(_IDENT.findall(old_text + "\n" + known))
    named = sorted(only_new & code_names(statement))
    if named:
        reasons.append(f"names what only the fix adds: {', '.join(named)}")
    return reasons


def split_provenance(message: str) -> tuple[str, str]:
    """(the message without the paragraphs saying how the task was made, those paragraphs).

    Such a paragraph ("(SWE-smith method: the bug was injected ...)") is true of the row but no part
    of an issue: the row keeps it as ``provenance``, the statement does not."""
    issue: list[str] = []
    how: list[str] = []
    for paragraph in re.split(r"\n\s*\n", message.strip()):
        (how if _PROVENANCE.match(paragraph.strip()) else issue).append(paragraph.strip())
    return "\n\n".join(issue).strip(), "\n\n".join(how).strip()


def code_names(text: str) -> set[str]:
    """The identifiers ``text`` uses as code: inside backticks or a fenced block, or shaped like code
    anywhere (an ``_``, a digit, or a capital after a lower-case letter: ``tally_helper``, ``i128``,
    ``isValid``). Plain words of prose ("the current code") are not names of code."""
    quoted = "\n".join(re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.DOTALL))
    shaped = {w for w in _IDENT.findall(text) if re.search(r"_|\d|[a-z][A-Z]", w)}
    return set(_IDENT.findall(quoted)) | shaped


def provenance_removed(message: str) -> str:
    """The message without paragraphs saying how the task was made (`split_provenance`)."""
    return split_provenance(message)[0]


def error_lines(log: str, *, limit: int = 15) -> list[str]:
    """The lines of a test log that say what failed (assertions, panics, failure summaries)."""
    out: list[str] = []
    for line in log.splitlines():
        if _ERROR_LINE.search(line):
            text = line.rstrip()[:200]
            if text not in out:
                out.append(text)
        if len(out) >= limit:
            break
    return out


def _leaf(test: str) -> str:
    return re.split(r"::|/|\.| ", test.strip())[-1]


def new_test_code(test_patch: str, test: str, *, limit: int = 25) -> list[str]:
    """The test patch's added definition of ``test`` (how to reproduce a new test): from its ``def``
    (``func``, ``fn``, ``test(``, ``it(``; after its class when the id names one) to the next line
    indented as little, a closing bracket included, at most ``limit`` lines."""
    leaf = _leaf(test)
    added = _patch_lines(test_patch, "+")
    parts = test.split("::")
    start = 0
    if len(parts) > 2:  # file::Class::test
        start = next(
            (i for i, ln in enumerate(added) if re.match(rf"\s*class {re.escape(parts[-2])}\b", ln)), 0
        )
    for i in range(start, len(added)):
        if leaf and re.search(rf"(def|func|fn|test\(|it\()\s*['\"]?{re.escape(leaf)}\b", added[i]):
            indent = len(added[i]) - len(added[i].lstrip())
            body = [added[i]]
            for line in added[i + 1 : i + limit]:
                if line.strip() and len(line) - len(line.lstrip()) <= indent:
                    if line.strip()[0] in ")}]":
                        body.append(line)
                    break
                body.append(line)
            while body and not body[-1].strip():
                body.pop()
            return body
    return []


def _files(tests: list[str]) -> list[str]:
    return sorted({t.split("::", 1)[0] for t in tests if "::" in t})


def from_tests(
    candidate: Candidate,
    language: RepoLanguage,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    before_log: str,
) -> str:
    """The deterministic statement: failing tests, what they print, how to run them, what is expected."""
    shown = fail_to_pass[:10]
    where = ", ".join(_files(fail_to_pass)) or "the test suite"
    title = f"{_leaf(fail_to_pass[0])} fails" if len(fail_to_pass) == 1 else f"{len(fail_to_pass)} tests fail"
    parts = [f"{title} in {where}", "", "**What happens.** On the current code, these tests fail:"]
    parts += [f"- `{t}`" for t in shown]
    if len(fail_to_pass) > len(shown):
        parts.append(f"- and {len(fail_to_pass) - len(shown)} more")
    known = candidate.test_patch + "\n" + "\n".join(fail_to_pass)
    # Judged as the statement shows them, in a fenced block: every identifier there counts as code.
    errors = [
        ln for ln in error_lines(before_log) if not leaks(_fenced([ln]), candidate.gold_patch, known=known)
    ]
    if errors:
        parts += ["", "What the run prints:", "```", *errors, "```"]
    parts += ["", "**How to reproduce.** From the repository's top:", "```", language.command_for(
        [f for f in candidate.test_files]
    ), "```"]  # fmt: skip
    snippets = [(t, new_test_code(candidate.test_patch, t)) for t in shown]
    snippets = [
        (t, code)
        for t, code in snippets
        if code and not leaks(_fenced(code), candidate.gold_patch, known=known)
    ][:2]
    for test, code in snippets:
        parts += ["", f"`{_leaf(test)}` checks:", "```", *code, "```"]
    n = len(pass_to_pass)
    keep = f", and the {n} test{'s' * (n != 1)} that pass{'es' * (n == 1)} today keep{'s' * (n == 1)} passing"
    parts += ["", f"**What is expected.** The failing tests pass{keep if n else ''}."]
    return "\n".join(parts).strip() + "\n"


def _fenced(lines: list[str]) -> str:
    return "\n".join(["```", *lines, "```"])


_PROMPT = (
    "Write a GitHub issue for a bug or missing behaviour that the following failing tests reveal. "
    "Say the symptom, how to reproduce it and what is expected. Do not say how to fix it, do not "
    "write the fix's code, do not mention tests that were added or how the issue was made. "
    "Answer with the issue's title on the first line and its body after it."
)


def from_model(settings: StatementSettings, facts: str) -> str:
    """The model's statement from ``facts`` (POST ``{model_url}/chat/completions``); raises on failure."""
    if not settings.model_url:
        raise ValueError("--statement model needs --statement-model-url")
    body = {
        "model": settings.model,
        "messages": [{"role": "system", "content": _PROMPT}, {"role": "user", "content": facts}],
        "temperature": 0,
    }
    headers = {"Content-Type": "application/json"}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    request = urllib.request.Request(
        settings.model_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), headers=headers
    )
    with urllib.request.urlopen(request, timeout=settings.timeout) as resp:
        answer: Mapping[str, object] = json.load(resp)
    content = answer["choices"][0]["message"]["content"]  # type: ignore[index]
    if not isinstance(content, str) or not content.strip():
        raise ValueError("the model's answer is empty")
    return content.strip() + "\n"


def write_statement(
    settings: StatementSettings,
    candidate: Candidate,
    language: RepoLanguage,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    before_log: str,
) -> tuple[str, str]:
    """(statement, its source): the chosen source's when it can be had and does not leak, else ``tests``'s."""
    fallback = from_tests(candidate, language, fail_to_pass, pass_to_pass, before_log)
    known = candidate.test_patch + "\n" + "\n".join(fail_to_pass)
    text, why = "", ""
    try:
        if settings.source == "commit":
            text = provenance_removed(candidate.message)
        elif settings.source == "model":
            facts = fallback + "\n\nThe change's own description (may be unrelated):\n" + candidate.message
            text = from_model(settings, facts)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        why = f"{settings.source} failed: {exc}"[:200]
    if text:
        reasons = leaks(text, candidate.gold_patch, known=known)
        if not reasons:
            return text if text.endswith("\n") else text + "\n", settings.source
        why = f"{settings.source} refused: {reasons[0]}"[:200]
    return fallback, "tests" + (f" ({why})" if why else "")
