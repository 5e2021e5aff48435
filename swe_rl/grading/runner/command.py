"""Reading an eval script's test command: is it a plain pytest call, which paths does it name, does it
select tests or stop early (where the grader's canaries could not run beside the task's)."""

from __future__ import annotations

import posixpath
import shlex

from pydantic import BaseModel, Field

__all__ = ["RunnerCommand", "read_runner_command"]

_VALUE_SHORT = set("rkmpcoWn")  # short options whose value follows (attached or as the next word)
_VALUE_LONG = {
    "--tb", "--rootdir", "--deselect", "--ignore", "--ignore-glob", "--durations", "--import-mode",
    "--confcutdir", "--basetemp", "--override-ini", "--junitxml", "--junit-xml", "--log-level",
    "--color", "--capture", "--cov", "--cov-report", "--timeout", "--pythonwarnings", "--dist",
    "--numprocesses", "--log-file", "--log-cli-level", "--randomly-seed",
}  # fmt: skip
_SELECTING = {
    "--exitfirst", "--maxfail", "--sw", "--stepwise", "--stepwise-skip", "--lf", "--last-failed",
    "--co", "--collect-only", "--pdb", "--trace", "--keyword", "--markers",
}  # fmt: skip


class RunnerCommand(BaseModel):
    """What an eval script's test command is."""

    runner: str
    """``pytest`` for a plain pytest call, else the command's first word (``?`` when unreadable)."""
    paths: list[str] = Field(default_factory=list)
    """Its path arguments (files, directories, node ids), as written."""
    capture: bool = True
    """pytest captures the tests' output (no ``-s`` / ``--capture=no``)."""
    refused: str = ""
    """Why no tests of the grader's can join this run ("" when they can)."""


def read_runner_command(lines: list[str]) -> RunnerCommand:
    """What the test command is: a plain pytest call (its path arguments) or something else."""
    body = [line for line in lines if line.strip() and not line.strip().startswith("#")]
    if len(body) != 1:
        return RunnerCommand(runner="?", refused=f"the test command has {len(body)} lines")
    lexer = shlex.shlex(body[0], posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        return RunnerCommand(runner="?", refused=f"the test command does not parse: {exc}")
    if any(w and set(w) <= set("();<>|&") for w in words) or "$(" in body[0] or "`" in body[0]:
        return RunnerCommand(
            runner="?", refused="the test command is not one plain call (pipes, lists, redirects)"
        )
    while words and "=" in words[0] and words[0].split("=")[0].isidentifier():
        words.pop(0)  # VAR=value before the command
    head = words[0] if words else ""
    if posixpath.basename(head) in ("pytest", "py.test"):
        args = words[1:]
    elif posixpath.basename(head).startswith("python") and words[1:3] == ["-m", "pytest"]:
        args = words[3:]
    else:
        return RunnerCommand(
            runner=posixpath.basename(head) or "?", refused=f"the test runner is not pytest ({head})"
        )
    cmd = RunnerCommand(runner="pytest")
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            cmd.paths += args[i:]
            break
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name in _SELECTING:
                cmd.refused = f"the test command selects or stops early ({word})"
            if name == "--capture" and (word.endswith("=no") or args[i : i + 1] == ["no"]):
                cmd.capture = False
            if name in _VALUE_LONG and "=" not in word:
                i += 1
            continue
        if word.startswith("-") and len(word) > 1:
            for pos, flag in enumerate(word[1:], start=2):
                if flag in _VALUE_SHORT:
                    value = word[pos:] or (args[i] if i < len(args) else "")
                    i += 0 if word[pos:] else 1
                    if flag in "km":
                        cmd.refused = f"the test command selects tests (-{flag})"
                    if flag == "p" and value == "no:unittest":
                        cmd.refused = "the test command disables unittest collection"
                    break
                if flag == "x":
                    cmd.refused = "the test command stops at the first failure (-x)"
                if flag == "s":
                    cmd.capture = False
            continue
        cmd.paths.append(word)
    return cmd
