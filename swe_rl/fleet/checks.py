"""Checks of a raw request body, below the models, shared by both servers (standard library only).

Why: JSON lets through values neither server can use, some in fields no model reads. Nesting
deep enough to overflow the parser, NaN and infinities (no JSON encoder sends them on) and lone
surrogates (no UTF-8 encoder writes them) used to surface as 500s deep inside a handler or an
HTTP client. They are refused here, naming the field, before anything is validated, forwarded or
created; the fields themselves are the business of the protocol's models (`protocol.parse`).
Docker's own messages go through `scrub` before they reach a caller, so no host path leaks.

Part of the fleet package installed on every node (see server/setup_docker_node.sh).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 32
"""Deepest nesting a request may have (the real APIs need 3)."""

# A lone surrogate can only arrive as a \\u escape (a UTF-8 decoder refuses the raw bytes),
# so strings are checked only when the body holds one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_HOST_PATH = re.compile(
    r"(?:/var/lib/docker|/var/run/docker|/run/docker|/run/containerd|/var/lib/containerd"
    r"|/[^\s\"']*/overlay2)[^\s\"',;)]*"
)


class InvalidRequest(ValueError):
    """A request the server must refuse; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object whose every value a server can pass on, or InvalidRequest."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise InvalidRequest(f"request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("request body must be a JSON object") from None
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    check_values(data, strings=bool(_SURROGATE_ESCAPE.search(raw)))
    return data


def check_values(value: Any, path: str = "", depth: int = 0, *, strings: bool = True) -> None:
    """Refuse non-finite numbers, lone surrogates and deep nesting, naming the field they are in."""
    if depth > MAX_DEPTH:
        raise InvalidRequest(
            f"request body is nested too deeply at {path or 'the top'} (at most {MAX_DEPTH} levels)"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(f"field {path!r} must be a finite number")
    elif isinstance(value, str):
        if strings and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidRequest(f"field {path!r} is not valid Unicode (lone surrogate)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if strings:
                check_values(key, path or "key", depth + 1, strings=True)
            check_values(item, sub, depth + 1, strings=strings)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_values(item, f"{path}[{i}]", depth + 1, strings=strings)


def scrub(text: str, roots: tuple[str, ...] = ()) -> str:
    """Docker's message without host paths (its data root and runtime directories)."""
    for root in roots:
        if root and root != "/":
            text = re.sub(re.escape(root.rstrip("/")) + r"[^\s\"',;)]*", "<host path>", text)
    return _HOST_PATH.sub("<host path>", text)
