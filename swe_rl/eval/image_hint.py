"""What to run when an instance's image is on no node: an `ImageNotFound` names the command.

An allocate that finds its image nowhere fails with the pool's message ("image not found on any
healthy node: IMAGE"); on its own it leaves a new user guessing. The bundled fixture images are
built offline on this machine (`bash data/build_fixture_images.sh`, which builds the multi-language
ones too); other images are pulled onto the Docker nodes (`data/pull_swe_images.sh`, docs/images.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["FIXTURE_BUILD", "image_hint", "missing_images"]

FIXTURE_PREFIX = "swe-rl/fixture."
FIXTURE_BUILD = "bash data/build_fixture_images.sh"
_MISSING = re.compile(r"image not found on [^:]*: (\S+)")


def missing_images(messages: Iterable[str | None]) -> list[str]:
    """The images named by ImageNotFound messages, in first-seen order."""
    seen: dict[str, None] = {}
    for message in messages:
        for image in _MISSING.findall(message or ""):
            seen.setdefault(image, None)
    return list(seen)


def image_hint(messages: Iterable[str | None], local_fleet: bool) -> str | None:
    """One line naming the command that makes the missing images available, or None (none missing)."""
    images = missing_images(messages)
    if not images:
        return None
    fixtures = [i for i in images if i.startswith(FIXTURE_PREFIX)]
    others = [i for i in images if not i.startswith(FIXTURE_PREFIX)]
    shown = ", ".join(images[:3]) + (f" and {len(images) - 3} more" if len(images) > 3 else "")
    where = "on this machine's Docker" if local_fleet else "on any healthy Docker node of the fleet"
    steps = []
    if fixtures:
        steps.append(f"build the bundled task images: {FIXTURE_BUILD}")
    if others:
        pull = "IMAGE_LIST=<file of image names> bash data/pull_swe_images.sh"
        steps.append(
            f"pull them {'here' if local_fleet else 'on every Docker node'}: {pull} (docs/images.md)"
        )
    return f"hint: {len(images)} image(s) not found {where} ({shown}); " + "; ".join(steps)
