"""Image names of instances, with templates, prefixes and environment overrides (swe_rl.tasks.images)."""

from __future__ import annotations

import pytest
from task_rows import swebench_row

from swe_rl.tasks import (
    image_for,
    instance_from_row,
)


def test_image_templates_and_prefixes(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.delenv("SWE_IMAGE_PREFIX", raising=False)
    row = {"instance_id": "django__django-11099", "repo": "django/django"}
    assert image_for(row) == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert image_for(row, source="swe-gym") == "xingyaoww/sweb.eval.x86_64.django_s_django-11099:latest"
    assert image_for(row, override="reg:5000/sweb.eval.x86_64.{id_swebench}:v2") == (
        "reg:5000/sweb.eval.x86_64.django_1776_django-11099:v2"
    )
    assert image_for(row, override="{repo}|{instance_id}|{id_swegym}") == (
        "django/django|django__django-11099|django_s_django-11099"
    )
    assert image_for(row, override="mirror.local:5000/swebench") == (
        "mirror.local:5000/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert image_for({**row, "image_name": "own/image:1"}) == "own/image:1"
    with pytest.raises(ValueError, match="unknown placeholder"):
        image_for(row, override="x/{nope}")


def test_image_override_from_environment(monkeypatch):
    monkeypatch.delenv("SWE_IMAGE_TEMPLATE", raising=False)
    monkeypatch.setenv("SWE_IMAGE_PREFIX", "mirror.local:5000/swebench/")
    inst = instance_from_row(swebench_row())
    assert inst.image == "mirror.local:5000/swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    monkeypatch.setenv("SWE_IMAGE_TEMPLATE", "local/{id_swebench}")
    assert image_for(inst) == "local/psf_1776_requests-2317"
