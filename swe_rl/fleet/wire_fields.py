"""The constrained field types the wire contract's request models are built from.

Patterns, validators and `Annotated` types of single fields (paths, images, names, limits, counts),
shared by the exec and pool requests of `protocol` and the snapshot models: a field means the same on
every endpoint, and its validators are the one place its rules live. Their refusals become the
servers' 400 answers through `protocol.refusal`. Needs pydantic only.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo

CONTAINER_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
IMAGE = r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,255}$"
NETWORK_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
MEMORY = r"^[0-9]+[bkmgBKMG]?$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
LABEL_VALUE = r"^[A-Za-z0-9_.:@/+-]{0,128}$"
USER = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$"
GIT_REVISION = r"^[A-Za-z0-9_./^~-]{1,200}$"
FORBIDDEN_WORKDIRS = ("/proc", "/sys", "/dev")


def _no_nul(value: str, info: ValidationInfo) -> str:
    if "\x00" in value:
        raise ValueError(f"field {info.field_name!r} contains a NUL byte")
    return value


def _absolute(value: str, info: ValidationInfo) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise ValueError(f"{info.field_name} must be an absolute path")
    return value


def _workdir(value: str) -> str:
    """Normalised, and outside the kernel's pseudo file systems."""
    if ".." in value.split("/"):
        raise ValueError("workdir may not contain '..'")
    value = posixpath.normpath(value).replace("//", "/")
    if any(value == p or value.startswith(p + "/") for p in FORBIDDEN_WORKDIRS):
        raise ValueError(f"workdir may not be under {', '.join(FORBIDDEN_WORKDIRS)}")
    return value


def _whole(value: Any) -> Any:
    """2.0 is 2 (as JSON writers may send it); 1.5 stays a float and fails as one."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _image(value: str) -> str:
    if not re.match(IMAGE, value):
        raise ValueError(f"invalid image name {value!r}")
    return value


def _memory(value: Any) -> str:
    """'4g', '512m' or a byte count (a JSON number is one too)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not re.match(MEMORY, str(value)):
        raise ValueError("memory must look like '4g', '512m' or a byte count")
    return str(value)


def _network(value: bool | str | None) -> bool | str:
    """False/None/'none': no network; True/'default'/'bridge': Docker's bridge; else a network's name."""
    if value is None or value is False or value == "none":
        return False
    if value is True or value in ("default", "bridge"):
        return True
    if value == "host":
        raise ValueError("network must be true/false, 'none', 'default' or a Docker network name")
    return value


Text = Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]
"""A required, non-empty string without NUL bytes (command, eval script, image)."""
FilePath = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_no_nul)]
AbsPath = Annotated[str, Field(max_length=4096), AfterValidator(_absolute)]
Workdir = Annotated[AbsPath, AfterValidator(_workdir)]
Image = Annotated[Text, AfterValidator(_image)]
ContainerId = Annotated[str, Field(pattern=CONTAINER_ID)]
Label = Annotated[str, BeforeValidator(lambda v: "" if v is None else v), Field(pattern=LABEL_VALUE)]
Env = Annotated[
    dict[Annotated[str, Field(pattern=ENV_NAME)], Annotated[str, AfterValidator(_no_nul)]],
    BeforeValidator(lambda v: {} if v is None else v),
]
Network = Annotated[bool | Annotated[str, Field(pattern=NETWORK_NAME)] | None, AfterValidator(_network)]
Memory = Annotated[str, BeforeValidator(_memory)]
Seconds = Annotated[float, Field(ge=0.1)]
Whole = Annotated[int, BeforeValidator(_whole)]
Count = Annotated[Whole, Field(ge=0, le=100_000)]

User = Annotated[
    Annotated[str, Field(pattern=USER)] | None, BeforeValidator(lambda v: None if v == "" else v)
]
Name = Annotated[str, Field(min_length=1, max_length=256)]
RequestId = Annotated[str, Field(min_length=1, max_length=200)]
