"""Image names a Docker daemon would resolve to a container snapshot's image (`kind="container"`).

Why its own module: the pool refuses such names in a plain allocate or warm (they would skip the
snapshot's owner check), and "one spelling" is a hole: a daemon also resolves the default registry and
``library/`` forms, and a bare image id may name any local image. No imports beyond the standard library.
"""

from __future__ import annotations

import re

CONTAINER_SNAPSHOT_REPOSITORY = "swe-rl-snapshot"
"""Repository of container snapshots' images on their node (``swe-rl-snapshot:<snapshot id>``): the pool
starts them only through ``from_snapshot`` (owner-checked), never as a named image."""


_IMAGE_ID = re.compile(r"(sha256:)?[0-9a-f]{12,64}")
_DEFAULT_REGISTRIES = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")


def names_a_snapshot_image(image: str) -> bool:
    """Whether a Docker daemon would resolve `image` to a container snapshot's image, in any spelling it
    accepts: ``swe-rl-snapshot:<id>``, with the default registry or ``library/`` before it, any case of
    the registry, or an image id (a bare id may name any local image, so every bare id counts)."""
    name = image.strip()
    if _IMAGE_ID.fullmatch(name.lower()):
        return True
    lowered = name.lower()
    for registry in _DEFAULT_REGISTRIES:
        if lowered.startswith(registry):
            name = name[len(registry) :]
            break
    name = name.removeprefix("library/")
    repository = re.split(r"[:@]", name, maxsplit=1)[0]
    return repository.lower() == CONTAINER_SNAPSHOT_REPOSITORY


def refuse_snapshot_image(image: str) -> str:
    """`image`, unless it names a snapshot's image (a ValueError: the pool's 400)."""
    if names_a_snapshot_image(image):
        raise ValueError(
            "a container snapshot's image (or an image id) is allocated with from_snapshot, not by name"
        )
    return image
