"""A container snapshot's image is reached only through `from_snapshot` (owner-checked): a plain allocate or
warm naming it in any spelling a Docker daemon resolves is refused (swe_rl/fleet/image_names.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swe_rl.fleet.image_names import names_a_snapshot_image
from swe_rl.fleet.protocol import AllocateRequest, PoolWarmRequest

SNAPSHOT_SPELLINGS = [
    "swe-rl-snapshot:abc",
    "swe-rl-snapshot",  # :latest
    "library/swe-rl-snapshot:abc",
    "docker.io/swe-rl-snapshot:abc",
    "docker.io/library/swe-rl-snapshot:abc",
    "Docker.IO/library/swe-rl-snapshot:abc",
    "index.docker.io/library/swe-rl-snapshot:abc",
    "registry-1.docker.io/swe-rl-snapshot:abc",
    "swe-rl-snapshot@sha256:" + "a" * 64,
    " swe-rl-snapshot:abc",
    "0b40b0668b85",  # a bare image id may name any local image, a snapshot's too
    "sha256:" + "0b40b0668b85" * 5 + "abcd",
]
TASK_IMAGES = [
    "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
    "swe-rl/fixture-pytoolz:1",
    "localhost:5000/swe-rl-snapshot-mirror/x:1",
    "registry.example/swe-rl-snapshot:abc",  # another registry: not this node's local image
    "swe-rl-snapshots:abc",
]


@pytest.mark.parametrize("image", SNAPSHOT_SPELLINGS)
def test_every_spelling_of_a_snapshot_image_is_refused(image):
    assert names_a_snapshot_image(image)
    for model in (AllocateRequest, PoolWarmRequest):
        with pytest.raises(ValidationError):  # by this rule, or earlier by the image name's syntax
            model.model_validate({"image": image, "count": 1})


@pytest.mark.parametrize("image", TASK_IMAGES)
def test_task_images_pass(image):
    assert not names_a_snapshot_image(image)
    assert AllocateRequest.model_validate({"image": image}).image == image
