"""Image names: which Docker image an instance runs in.

The row's own ``image_name`` / ``image`` / ``docker_image`` wins, else the dataset family's public
name (SWE-bench ``swebench/…_1776_…``, SWE-Gym ``xingyaoww/…_s_…``); a user override (an argument,
``$SWE_IMAGE_TEMPLATE`` or ``$SWE_IMAGE_PREFIX``) is applied on top.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from typing import Any

from swe_rl.tasks.instance import DataSource, TaskInstance

__all__ = ["ENV_IMAGE_PREFIX", "ENV_IMAGE_TEMPLATE", "default_image", "image_for"]

ENV_IMAGE_TEMPLATE = "SWE_IMAGE_TEMPLATE"
ENV_IMAGE_PREFIX = "SWE_IMAGE_PREFIX"

_TEMPLATE_FIELDS = {"instance_id", "id_swebench", "id_swegym", "repo", "image"}


def _swebench_id(instance_id: str) -> str:
    return instance_id.lower().replace("__", "_1776_")


def _swegym_id(instance_id: str) -> str:
    return instance_id.lower().replace("__", "_s_")


def default_image(instance_id: str, source: DataSource) -> str:
    """The public image name a dataset family uses for an instance id."""
    if source is DataSource.SWEGYM:
        return f"xingyaoww/sweb.eval.x86_64.{_swegym_id(instance_id)}:latest"
    return f"swebench/sweb.eval.x86_64.{_swebench_id(instance_id)}:latest"


def _apply_override(image: str, override: str, instance_id: str, repo: str) -> str:
    """A template (has ``{...}``) is formatted; anything else is a registry/namespace prefix."""
    if "{" in override:
        names = {f for _, f, _, _ in string.Formatter().parse(override) if f is not None}
        unknown = names - _TEMPLATE_FIELDS
        if unknown:
            raise ValueError(
                f"image template {override!r} has unknown placeholder(s) {sorted(unknown)}; "
                f"use {sorted(_TEMPLATE_FIELDS)}"
            )
        return override.format(
            instance_id=instance_id,
            id_swebench=_swebench_id(instance_id),
            id_swegym=_swegym_id(instance_id),
            repo=repo,
            image=image,
        )
    name = image.rsplit("/", 1)[-1]
    return f"{override.rstrip('/')}/{name}"


def image_for(
    instance: Mapping[str, Any] | TaskInstance,
    *,
    source: DataSource | str | None = None,
    override: str | None = None,
) -> str:
    """Image name for a row or instance.

    Precedence: a user override (``override``, else ``$SWE_IMAGE_TEMPLATE``, else
    ``$SWE_IMAGE_PREFIX``) applied to the base name; the base name is the row's own
    ``image_name`` / ``image`` / ``docker_image`` when present, else the dataset family's
    public name (SWE-bench ``swebench/…_1776_…``, SWE-Gym ``xingyaoww/…_s_…``).
    """
    row: Mapping[str, Any] = instance.model_dump() if isinstance(instance, TaskInstance) else instance
    if isinstance(source, str) or source is None:
        source = DataSource.detect(source if source is not None else row.get("data_source"))
    instance_id = str(row.get("instance_id") or "")
    repo = str(row.get("repo") or row.get("repo_name") or "")
    explicit = next((row[k] for k in ("image_name", "image", "docker_image") if row.get(k)), None)
    if explicit is not None:
        base = str(explicit)
    elif instance_id:
        base = default_image(instance_id, source)
    else:
        raise ValueError("row has no instance_id and no image_name/docker_image to name its image")
    override = override or os.environ.get(ENV_IMAGE_TEMPLATE) or os.environ.get(ENV_IMAGE_PREFIX)
    return _apply_override(base, override, instance_id, repo) if override else base
