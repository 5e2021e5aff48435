"""The text of a Python source file as the interpreter reads it, not as a UTF-8 reader would.

The interpreter decodes a module with the codec its first two lines declare (PEP 263) and strips a
UTF-8 byte-order mark. A scanner that decodes every file as UTF-8 parses something else than what
runs: ``# coding: utf_7`` or ``# coding: unicode_escape`` turns harmless-looking escapes into code,
and a BOM (``U+FEFF``) makes the scanner's parse fail while the interpreter runs the file. So the
scan reads each file the interpreter's way (``tokenize.detect_encoding``, the standard library's
copy of the interpreter's rule), and says when that way is not plain UTF-8: a reviewer cannot read
such a file either, so added source in another codec is voided by the scan
(swe_rl/grading/scans/capabilities/scan.py, capability ``source_encoding``).
"""

from __future__ import annotations

import codecs
import io
import tokenize
from typing import NamedTuple

__all__ = ["UTF8", "SourceText", "ascii_transparent", "interpreter_text"]

UTF8 = "utf-8"


class SourceText(NamedTuple):
    text: str | None
    """What the interpreter decodes (None: it cannot decode the bytes, so it cannot run them either)."""
    encoding: str
    """The codec's canonical name (``utf-8`` for a BOM or a UTF-8 declaration); "" when unknown."""
    problem: str
    """Why the text is not what a UTF-8 reader sees ("" when it is)."""


def interpreter_text(data: bytes) -> SourceText:
    """Decode `data` as the interpreter decodes a module: declared codec, BOM stripped."""
    try:
        declared, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # unknown codec, BOM with another declaration, invalid bytes in a cookie
        return SourceText(None, "", f"the interpreter refuses its encoding: {exc}")
    try:
        name = codecs.lookup(declared).name
    except LookupError:
        return SourceText(None, "", f"unknown codec {declared!r}")
    codec = "utf-8-sig" if name == UTF8 or declared == "utf-8-sig" else name
    try:
        text = data.decode(codec)
    except (UnicodeDecodeError, ValueError, LookupError) as exc:  # LookupError: not a text codec (rot13)
        return SourceText(None, name, f"does not decode as {name}: {exc}")
    if codec == "utf-8-sig":
        return SourceText(text, UTF8, "")
    return SourceText(text, name, f"declares the codec {name!r} (PEP 263): not UTF-8")


def ascii_transparent(encoding: str) -> bool:
    """A codec that decodes every printable ASCII byte to itself (Latin-1, cp1252...): source in it
    parses as a UTF-8 reader would read its ASCII part. ``utf-7``, ``unicode_escape``, ``utf-16`` are not."""
    sample = bytes(range(0x20, 0x7F)) + b"\t\n\r \\x41 \\u0041 \\101 +AGE- ~{A} \x1b$BA"  # escapes and shifts
    try:
        return sample.decode(encoding) == sample.decode("ascii")
    except (UnicodeDecodeError, LookupError, ValueError):
        return False
