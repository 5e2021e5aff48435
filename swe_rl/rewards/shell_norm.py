"""Canonical forms of shell commands, for comparing a policy's command with an expert's.

    a = canonical_command("cd /testbed && grep -rn 'foo'  ./src | head -20")
    b = canonical_command('grep -n -r foo src|head -n 20')
    a == b                      # True: same command, spelt differently

A small POSIX-shell lexer (quotes, escapes, ``$(...)``, backticks, operators, redirections,
here-documents) turns a command into simple commands joined by operators. Equivalences
applied, each one safe for the commands an agent runs in its task checkout:

- whitespace, quoting and escaping (``grep "a b"`` = ``grep 'a b'`` = ``grep a\\ b``), line
  continuations, comments, a newline = ``;``, a trailing ``;``;
- paths: the working-directory prefix and ``./`` of arguments (``/testbed/x.py`` = ``./x.py`` =
  ``x.py``; a program keeps its ``./``), also in ``--opt=path`` and redirection targets;
  a leading ``cd <workdir> &&`` (or ``;``) is dropped;
- ``bash -c '<cmd>'`` / ``sh -lc`` wrapping the whole command is unwrapped;
- program aliases (``python3`` = ``python`` by default);
- short boolean flags of a few GNU tools (`BOOLEAN_FLAGS`) as a set, wherever they stand
  (``ls -la`` = ``ls -a -l``; ``grep foo -rn`` = ``grep -nr foo``); flags taking values, long
  flags and the order of everything else are kept;
- ``head`` / ``tail`` line counts (``-20`` = ``-n 20`` = ``-n20`` = ``--lines=20``);
- stderr merged into stdout (``2>&1``, ``|&``) when `ignore_stderr_merge` (the agent's
  observation is stdout and stderr together anyway);
- redirections in any order (unless one duplicates a descriptor).

Everything else must be equal, so two unrelated commands never match. Here-document bodies
are returned apart (`Canonical.bodies`) for a text comparison of their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "BOOLEAN_FLAGS",
    "Canonical",
    "ShellSyntaxError",
    "canonical_command",
    "normalize_path",
    "tokenize",
]


class ShellSyntaxError(ValueError):
    """The command does not lex (an unterminated quote or substitution)."""


BOOLEAN_FLAGS: dict[str, str] = {
    "ls": "aAbBcCdfFgGhHiklLmnNopqQrRsStuUvxXZ1",
    "grep": "cEFGhHiIlLnoqrRsUvwxzPa", "egrep": "cEFGhHiIlLnoqrRsUvwxzPa", "fgrep": "cEFGhHiIlLnoqrRsUvwxzPa",
    "cat": "AbeEnsTtuv", "rm": "rRfidv", "mkdir": "pv", "wc": "lwcmL", "sort": "nrufbdiRsVh", "uniq": "cdui",
    "diff": "uNraqwbBiy", "sed": "nEsrz", "python -m pytest": "qvxsl", "pytest": "qvxsl",
}  # fmt: skip
"""Short flags that take no value, per program: flags made only of these letters are compared as a set."""

_OPERATORS = ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")")
_REDIRECT = re.compile(r"(\d*)(>>|>&|>\||<<<|<<-|<<|<&|<>|>|<)|(&>>|&>)")
_WORD_END = set(" \t\n;&|<>()")


@dataclass
class _Redirect:
    op: str
    target: str


@dataclass
class _Simple:
    words: list[str] = field(default_factory=list)
    redirects: list[_Redirect] = field(default_factory=list)


def _read_balanced(s: str, i: int, open_: str, close: str) -> int:
    """Index after the ``close`` matching the ``open_`` just before i (quotes respected)."""
    depth = 1
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            end = s.find(c, i + 1)
            if end < 0:
                raise ShellSyntaxError(f"unterminated {c} inside a substitution")
            i = end + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellSyntaxError(f"unterminated {open_}")


def _read_word(s: str, i: int) -> tuple[str, int, bool]:
    """(unquoted text, end index, whether any part was quoted) of the word starting at i."""
    out: list[str] = []
    quoted = False
    n = len(s)
    while i < n and s[i] not in _WORD_END:
        c = s[i]
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated single quote")
            out.append(s[i + 1 : end])
            quoted, i = True, end + 1
        elif c == '"':
            i += 1
            quoted = True
            while True:
                if i >= n:
                    raise ShellSyntaxError("unterminated double quote")
                c = s[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and s[i + 1] in '"\\$`\n':
                    if s[i + 1] != "\n":
                        out.append(s[i + 1])
                    i += 2
                elif c == "$" and s.startswith("$(", i):
                    end = _read_balanced(s, i + 2, "(", ")")
                    out.append(s[i:end])
                    i = end
                else:
                    out.append(c)
                    i += 1
        elif c == "\\":
            if i + 1 < n and s[i + 1] != "\n":
                out.append(s[i + 1])
            quoted, i = True, i + 2
        elif c == "$" and (s.startswith("$(", i) or s.startswith("${", i)):
            open_, close = ("(", ")") if s[i + 1] == "(" else ("{", "}")
            end = _read_balanced(s, i + 2, open_, close)
            out.append(s[i:end])
            i = end
        elif c == "`":
            end = s.find("`", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated backtick")
            out.append(s[i : end + 1])
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out), i, quoted


def tokenize(command: str) -> list[tuple[str, str, str]]:
    """Tokens ``(kind, text, extra)``: ``("word", w, "")``, ``("op", op, "")``,
    ``("redirect", op, target)``, ``("heredoc", op, body)``. A newline is the operator ``;``."""
    s = command.replace("\r\n", "\n")
    tokens: list[tuple[str, str, str]] = []
    pending: list[tuple[int, str, bool]] = []  # (token index, delimiter, strip tabs)
    i, n = 0, len(s)
    at_word_start = True
    while i < n:
        c = s[i]
        if c in " \t":
            i += 1
            continue
        if c == "\\" and s.startswith("\\\n", i):
            i += 2
            continue
        if c == "#" and at_word_start:
            while i < n and s[i] != "\n":
                i += 1
            continue
        if c == "\n":
            i += 1
            for index, delimiter, strip in pending:  # bodies follow the line that opened them
                lines = []
                while i < n:
                    end = s.find("\n", i)
                    line = s[i:] if end < 0 else s[i:end]
                    i = n if end < 0 else end + 1
                    if (line.lstrip("\t") if strip else line) == delimiter:
                        break
                    lines.append(line.lstrip("\t") if strip else line)
                kind, op, _ = tokens[index]
                tokens[index] = (kind, op, "\n".join(lines))
            pending = []
            tokens.append(("op", ";", ""))
            continue
        m = _REDIRECT.match(s, i)
        if m:
            op = m.group(0)
            i = m.end()
            while i < n and s[i] in " \t":
                i += 1
            if op.endswith(("<<", "<<-")):
                delimiter, i, _ = _read_word(s, i)
                pending.append((len(tokens), delimiter, op.endswith("-")))
                tokens.append(("heredoc", "<<", ""))
                continue
            target, i, _ = _read_word(s, i)
            if not target:
                raise ShellSyntaxError(f"redirection {op} without a target")
            tokens.append(("redirect", op, target))
            continue
        operator = next((o for o in _OPERATORS if s.startswith(o, i)), None)
        if operator is not None:
            tokens.append(("op", operator, ""))
            i += len(operator)
            continue
        word, i, _ = _read_word(s, i)
        tokens.append(("word", word, ""))
    return tokens


def normalize_path(value: str, workdir: str = "/testbed", *, program: bool = False) -> str:
    """Arguments: ``/testbed/a`` → ``a``, ``/testbed`` → ``.``, ``./a`` → ``a``; a program keeps
    (or gets) its ``./`` since ``./run.sh`` and ``run.sh`` differ."""
    wd = workdir.rstrip("/")
    if wd and (value == wd or value == wd + "/"):
        return "."
    if wd and value.startswith(wd + "/"):
        value = "./" + value[len(wd) + 1 :]
    if program:
        return value
    while value.startswith("./") and len(value) > 2:
        value = value[2:].lstrip("/")
    return value


@dataclass
class Canonical:
    """A command's canonical form; equal forms mean the same command."""

    form: tuple
    """Nested tuples: simple commands and operators."""
    bodies: list[str]
    """Here-document bodies, in order (compared as text, not here)."""

    def flat(self) -> list[str]:
        """Tokens of the form, for a similarity score."""
        out: list[str] = []

        def walk(x: object) -> None:
            if isinstance(x, (tuple, list, frozenset)):
                for y in sorted(x) if isinstance(x, frozenset) else x:
                    walk(y)
            else:
                out.append(str(x))

        walk(self.form)
        return out


def _split(tokens: list[tuple[str, str, str]]) -> list[_Simple | str]:
    parts: list[_Simple | str] = []
    current = _Simple()
    for kind, text, extra in tokens:
        if kind == "op":
            if current.words or current.redirects:
                parts.append(current)
                current = _Simple()
            parts.append(text)
        elif kind == "word":
            current.words.append(text)
        else:
            current.redirects.append(_Redirect(text, extra if kind == "redirect" else "\x00heredoc"))
    if current.words or current.redirects:
        parts.append(current)
    while parts and parts[-1] in (";", "&&"):  # a trailing separator changes nothing ("&&" cannot end one)
        parts.pop()
    while parts and parts[0] == ";":
        parts.pop(0)
    return parts


def _program_key(words: list[str]) -> tuple[str, int]:
    """(table key, index of the first argument)."""
    if len(words) >= 3 and words[0] == "python" and words[1] == "-m":
        return f"python -m {words[2]}", 3
    return (words[0], 1) if words else ("", 0)


def _head_tail(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if re.fullmatch(r"-\d+", a):
            out += ["-n", a[1:]]
        elif re.fullmatch(r"-n[+-]?\d+", a):
            out += ["-n", a[2:]]
        elif a.startswith("--lines="):
            out += ["-n", a[len("--lines=") :]]
        elif a in ("-n", "--lines") and i + 1 < len(args):
            out += ["-n", args[i + 1]]
            i += 1
        else:
            out.append(a)
        i += 1
    return out


def _simple_form(cmd: _Simple, workdir: str, aliases: Mapping[str, str], ignore_stderr_merge: bool) -> tuple:
    words = list(cmd.words)
    assigns: list[str] = []
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        assigns.append(words.pop(0))
    if words:
        words[0] = normalize_path(aliases.get(words[0], words[0]), workdir, program=True)
        words[0] = aliases.get(words[0], words[0])
    key, first = _program_key(words)
    args = words[first:]
    if key in ("head", "tail"):
        args = _head_tail(args)
    flags: set[str] = set()
    table = BOOLEAN_FLAGS.get(key)
    rest: list[str] = []
    options_done = False
    for a in args:
        if a == "--":
            options_done = True
        if (
            table
            and not options_done
            and re.fullmatch(r"-[A-Za-z0-9]+", a)
            and all(ch in table for ch in a[1:])
        ):
            flags.update(a[1:])
            continue
        if a.startswith("--") and "=" in a:
            name, value = a.split("=", 1)
            rest.append(f"{name}={normalize_path(value, workdir)}")
        else:
            rest.append(normalize_path(a, workdir))
    redirects = []
    for r in cmd.redirects:
        op = r.op[1:] if r.op.startswith("1>") else r.op
        if ignore_stderr_merge and op == "2>&" and r.target == "1":
            continue
        target = (
            r.target if op.endswith("&") or r.target == "\x00heredoc" else normalize_path(r.target, workdir)
        )
        redirects.append((op, target))
    if not any(op.endswith("&") for op, _ in redirects):
        redirects.sort()
    return (tuple(sorted(assigns)), tuple(words[:first]), frozenset(flags), tuple(rest), tuple(redirects))


def _unwrap(parts: list[_Simple | str]) -> str | None:
    """The inner command of a whole-command ``bash -c '...'``."""
    if len(parts) != 1 or not isinstance(parts[0], _Simple) or parts[0].redirects:
        return None
    w = parts[0].words
    if len(w) == 3 and w[0] in ("bash", "sh", "/bin/bash", "/bin/sh") and re.fullmatch(r"-[li]*c[li]*", w[1]):
        return w[2]
    return None


def canonical_command(
    command: str,
    workdir: str = "/testbed",
    *,
    aliases: Mapping[str, str] | None = None,
    ignore_stderr_merge: bool = True,
    _depth: int = 0,
) -> Canonical:
    """The canonical form of a command line; raises `ShellSyntaxError` when it does not lex."""
    aliases = {"python3": "python"} if aliases is None else aliases
    tokens = tokenize(command)
    bodies = [extra for kind, _, extra in tokens if kind == "heredoc"]
    parts = _split(tokens)
    inner = _unwrap(parts)
    if inner is not None and _depth < 3:
        return canonical_command(
            inner, workdir, aliases=aliases, ignore_stderr_merge=ignore_stderr_merge, _depth=_depth + 1
        )
    # a leading `cd <workdir>` followed by && or ; is where every command starts anyway
    while (
        len(parts) >= 2
        and isinstance(parts[0], _Simple)
        and parts[1] in ("&&", ";")
        and not parts[0].redirects
        and len(parts[0].words) == 2
        and parts[0].words[0] == "cd"
        and normalize_path(parts[0].words[1], workdir) == "."
    ):
        parts = parts[2:]
    form: list[str | tuple] = []
    for part in parts:
        if isinstance(part, str):
            form.append("|" if (part == "|&" and ignore_stderr_merge) else part)
        else:
            form.append(_simple_form(part, workdir, aliases, ignore_stderr_merge))
    return Canonical(form=tuple(form), bodies=bodies)
