"""A real image registry on loopback (Debian's `docker-registry`) with small images in it.

Import the fixtures into a test module: `from registry_fixtures import local_registry, registry_images`.

The registry's storage is kept under ~/.cache (SWE_TEST_REGISTRY_STORAGE) so the base image's layers are
pushed once per machine, not once per run; the images made here are removed at the session's end.
"""

from __future__ import annotations

import os
import secrets
import shutil

import pytest

from swe_rl.testing.local_registry import LocalRegistry, build_layer_image, remove_test_images

REGISTRY_IMAGES = 4
LAYER_BYTES = 2 << 20


@pytest.fixture(scope="session")
def local_registry(docker_client, base_image):
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is not installed (apt-get install docker-registry)")
    storage = os.environ.get("SWE_TEST_REGISTRY_STORAGE", "~/.cache/swe-rl/test-registry")
    registry = LocalRegistry(storage=storage)
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def registry_images(docker_client, base_image, local_registry) -> list[str]:
    """Distinct images (the base plus one small layer each) in the registry and not on this node."""
    run = f"h-images-{secrets.token_hex(4)}"
    refs = []
    try:
        for i in range(REGISTRY_IMAGES):
            local = build_layer_image(docker_client, base_image, f"swe-rl-test/{run}-{i}:1", run, LAYER_BYTES)
            refs.append(local_registry.push(docker_client, local, f"swe-rl-test/{run}-{i}:1"))
            docker_client.images.remove(local)
        yield refs
    finally:
        for ref in refs:
            forget_image(docker_client, ref)
        remove_test_images(docker_client, run)


def forget_image(client, ref: str) -> None:
    """Remove the node's copy of a registry image (it stays in the registry)."""
    import docker.errors

    try:
        client.images.remove(ref, force=True)
    except docker.errors.ImageNotFound:
        pass
