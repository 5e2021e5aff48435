"""One way to read settings from environment variables, for every env-configured object of swe-rl.

Each config class declares, per field, the variable that sets it (`EnvVar`): its name, the names it
had before (refused with an error naming the new variable, so a renamed setting is never silently
dropped), and, for secrets, a companion variable naming a file that holds the value. `read_env` reads those
variables from the environment (or a mapping given for tests) and parses each by its field's type.

Prefixes: exec server `SWE_EXEC_*`, pool `SWE_POOL_*`, client `SWE_CLIENT_*` (it finds the pool
with `SWE_POOL_URL` / `SWE_POOL_TOKEN`), slime sandbox `SWE_FLEET_SANDBOX_*`, slime plugin `SWE_*`.
Rules shared by all: surrounding whitespace is ignored and an empty variable counts as unset; booleans are 1/true/yes/on or 0/false/no/off;
lists are comma-separated; dicts are JSON. This module lives in the fleet package because the fleet
imports nothing above it; the plugin imports it from here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EnvVar",
    "field_types",
    "parse_bool",
    "parse_value",
    "prefixed",
    "read_env",
    "read_var",
    "renamed_vars",
]

log = logging.getLogger(__name__)

_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


@dataclass(frozen=True)
class EnvVar:
    """The environment variable of one config field."""

    name: str
    """Its name, e.g. ``SWE_POOL_LEASE_TTL``."""
    old: tuple[str, ...] = ()
    """Names it had before: a value under one of them is an error that names ``name``."""
    file: str | None = None
    """A variable naming a file whose (stripped) content is the value when ``name`` is unset (tokens)."""
    parse: Callable[[str], Any] | None = None
    """Parser of the text, instead of the one of the field's type."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every variable this field reads: the name, its file variable, then the old names."""
        return (self.name,) + ((self.file,) if self.file else ()) + self.old


def prefixed(prefix: str, fields: Iterable[str], **special: EnvVar | None) -> dict[str, EnvVar]:
    """``{field: EnvVar(prefix + FIELD)}`` for every field; ``special`` overrides some (None: not read)."""
    out = {name: EnvVar(f"{prefix}{name.upper()}") for name in fields}
    for name, var in special.items():
        if var is None:
            out.pop(name, None)
        else:
            out[name] = var
    return out


def read_var(var: EnvVar, env: Mapping[str, str] | None = None) -> str | None:
    """The raw text of one variable (stripped for file values), trying the new name first; None when unset."""
    env = os.environ if env is None else env
    for old in var.old:  # checked first: a renamed setting left beside the new one is still a mistake
        if (env.get(old) or "").strip():
            raise ValueError(f"environment variable {old} was renamed: set {var.name} instead")
    value = (env.get(var.name) or "").strip()
    if value:
        return value
    path = (env.get(var.file) or "").strip() if var.file else ""
    return read_secret_file(path) if path else None


def read_secret_file(path: str) -> str:
    """A secret kept in a file (``~`` expanded), surrounding whitespace stripped."""
    with open(os.path.expanduser(path), encoding="utf-8") as fh:
        return fh.read().strip()


def read_token(token: str, token_file: str) -> str:
    """The bearer token: `token` when given, else the stripped content of `token_file`, else ""."""
    if token:
        return token.strip()
    return read_secret_file(token_file) if token_file else ""


def read_env(
    spec: Mapping[str, EnvVar], field_types: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``{field: parsed value}`` for every field of ``spec`` whose variable is set."""
    values: dict[str, Any] = {}
    for name, var in spec.items():
        text = read_var(var, env)
        if text is None:
            continue
        try:
            values[name] = var.parse(text) if var.parse else parse_value(text, field_types.get(name, str))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: {var.name}={text!r}: {exc}") from exc
    return values


def field_types(config_class: type) -> dict[str, Any]:
    """Field name -> annotation, for a dataclass or a pydantic model."""
    model_fields = getattr(config_class, "model_fields", None)
    if model_fields is not None:
        return {name: info.annotation for name, info in model_fields.items()}
    hints = typing.get_type_hints(config_class)
    return {f.name: hints.get(f.name, str) for f in dataclasses.fields(config_class)}


def renamed_vars(spec: Mapping[str, EnvVar]) -> dict[str, str]:
    """``{old name: new name}`` of every renamed variable in ``spec``."""
    return {old: var.name for var in spec.values() for old in var.old}


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("not a boolean (use 1/true/yes/on or 0/false/no/off)")


def parse_value(text: str, annotation: Any) -> Any:
    """Parse ``text`` as ``annotation`` (str, int, float, bool, X | None, tuple/list of str, dict).

    Other types get the text unchanged (a pydantic model validates it).
    """
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return parse_value(text, members[0]) if len(members) == 1 else text
    if annotation is bool:
        return parse_bool(text)
    if annotation is int:
        return int(text.strip())
    if annotation is float:
        return float(text.strip())
    if origin is dict or annotation is dict:
        return json.loads(text)
    if origin in (list, tuple) or annotation in (list, tuple):
        if text.lstrip().startswith("["):
            items = json.loads(text)
        else:
            items = [item.strip() for item in text.split(",") if item.strip()]
        return tuple(items) if (origin or annotation) is tuple else list(items)
    return text
