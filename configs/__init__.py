"""The configs and templates that ship inside the package (``swe_rl/configs/``).

They are read through ``importlib.resources``, so the same code works from a checkout, an editable
install and an installed wheel; nothing looks for a repository root. Three helpers:

- ``config_text(name)``: the text of a shipped config (``"harness_codex.yaml"``).
- ``config_path(name)``: a real file path of it for tools that need one (SGLang's ``--chat-template``,
  a YAML loader taking a path); valid until the interpreter exits.
- ``resolve_config(value)``: a user-given config path; one that does not exist from the working
  directory but names a shipped config (``configs/prm_judge.yaml``, ``swe_rl/configs/prm_judge.yaml``
  or ``prm_judge.yaml``) is that shipped file.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

__all__ = ["CONFIG_PACKAGE", "config_file", "config_path", "config_text", "resolve_config"]

CONFIG_PACKAGE = "swe_rl.configs"
_PREFIXES = ("swe_rl/configs/", "configs/")  # how repo-relative paths named the shipped configs
_files_kept = contextlib.ExitStack()  # as_file copies (only for zipped installs) live until exit
atexit.register(_files_kept.close)


def config_file(name: str) -> Traversable:
    """The shipped config ``name`` as an importlib.resources traversable (it may not exist)."""
    return resources.files(CONFIG_PACKAGE).joinpath(name)


def config_text(name: str) -> str:
    """The text of the shipped config ``name`` (``FileNotFoundError`` when there is none)."""
    return config_file(name).read_text(encoding="utf-8")


@functools.cache
def config_path(name: str) -> Path:
    """A real file path of the shipped config ``name``, valid for the life of this process."""
    ref = config_file(name)
    if not ref.is_file():
        raise FileNotFoundError(f"no shipped config {name!r} in {CONFIG_PACKAGE}")
    return _files_kept.enter_context(resources.as_file(ref))


@overload
def resolve_config(value: str) -> str: ...
@overload
def resolve_config(value: None) -> None: ...
def resolve_config(value: str | None) -> str | None:
    """A config path as given by a user: an absolute or existing relative path stays (made absolute);
    otherwise a name of a shipped config (with or without a ``configs/`` prefix) is that file; anything
    else is returned unchanged, for the loader to report."""
    if not value or Path(value).is_absolute():
        return value
    if Path(value).exists():
        return str(Path(value).resolve())
    name = value
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if "/" not in name and config_file(name).is_file():
        return str(config_path(name))
    return value
