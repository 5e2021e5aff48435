"""Wire contract of image prefetch: the pool's `POST /prefetch` and the exec server's `POST /images/prefetch`.

Pydantic models used by both servers and the client, kept apart from `protocol.py` (one job each).
A prefetch is a hint: the fleet pulls ahead within each node's disk budget and answers at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from swe_rl.fleet.checks import InvalidRequest

ImageRef = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[^\s]+$")]
MAX_IMAGES = 10_000


class ImageCount(BaseModel):
    """One image and how many leases of it are coming."""

    model_config = ConfigDict(extra="forbid")

    image: ImageRef
    count: int = Field(1, ge=0, le=100_000)
    """Leases of this image expected soon (0: no node needs to pull it)."""


class PrefetchRequest(BaseModel):
    """`POST /prefetch` to the pool: images of the next instances, each a name or `{image, count}`."""

    model_config = ConfigDict(extra="forbid")

    images: list[ImageCount] = Field(..., max_length=MAX_IMAGES)

    @field_validator("images", mode="before")
    @classmethod
    def _names_count_once(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"image": v} if isinstance(v, str) else v for v in value]
        return value


class NodePrefetchRequest(BaseModel):
    """`POST /images/prefetch` to an exec server: images to pull ahead, in order."""

    model_config = ConfigDict(extra="forbid")

    images: list[ImageRef] = Field(..., max_length=MAX_IMAGES)


class NodePrefetchAnswer(BaseModel):
    """What the node did with each image: `present`, `pulling`, `pulls_off` or `disk_full`."""

    images: dict[str, str]
    bytes_used: int
    budget: int


class PrefetchAnswer(BaseModel):
    """The pool's answer: which node was asked to pull which images (nodes holding one are skipped)."""

    ok: bool = True
    images: int
    nodes: dict[str, list[str]]


def prefetch_body(images: Mapping[str, int] | Iterable[str]) -> dict[str, Any]:
    """The body of `POST /prefetch`: image names (one lease each) or image -> leases expected."""
    if isinstance(images, Mapping):
        return {"images": [{"image": i, "count": int(n)} for i, n in images.items()]}
    return {"images": list(images)}


Model = TypeVar("Model", bound=BaseModel)


def parse(model: type[Model], body: dict[str, Any]) -> Model:
    """`body` as `model`, or a 400 naming the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise InvalidRequest(f"{where}: {err['msg']}") from None
