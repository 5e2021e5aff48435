"""The parser registry: swebench 5.x parser name -> our parser (the language modules fill it)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["PARSERS", "STATUSES", "Parser", "UnknownParser", "parser_named", "register"]

Parser = Callable[[str], dict[str, str]]

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)
"""In swebench's `TestStatus` order (a line is tried against them in this order)."""

PARSERS: dict[str, Parser] = {}
"""swebench 5.x parser name (``parse_log_pytest``, ``parse_log_gotest``, ...) -> our parser."""


class UnknownParser(LookupError):
    """A row names a parser this project does not have."""


def register(*names: str) -> Callable[[Parser], Parser]:
    """Register the decorated parser under one or more swebench parser names."""

    def add(fn: Parser) -> Parser:
        for name in names or (fn.__name__,):
            if name in PARSERS and PARSERS[name] is not fn:
                raise ValueError(f"parser {name!r} is registered twice")
            PARSERS[name] = fn
        return fn

    return add


def parser_named(name: str) -> Parser:
    """The parser registered under ``name``; `UnknownParser` says which names exist."""
    try:
        return PARSERS[name]
    except KeyError:
        raise UnknownParser(
            f"no log parser named {name!r} in swe_rl.grading.parsers (known: {', '.join(sorted(PARSERS))})"
        ) from None
