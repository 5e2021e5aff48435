"""Our stand-in for slime's Sample has upstream's field names, annotations and statuses (pinned commit)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from swe_rl.slime.samples import CompatSample, sample_class

UPSTREAM = json.loads((Path(__file__).parents[1] / "data" / "slime_sample_fields.json").read_text())


def test_compat_sample_has_upstream_fields_and_types_in_order():
    ours = [{"name": f.name, "type": str(f.type)} for f in dataclasses.fields(CompatSample)]
    assert ours == UPSTREAM["fields"]


def test_compat_sample_statuses_match_upstream():
    assert {s.name: s.value for s in CompatSample.Status} == UPSTREAM["status"]


def test_defaults_are_fresh_per_sample():
    a, b = CompatSample(), CompatSample()
    a.tokens.append(1)
    a.metadata["x"] = 1
    assert b.tokens == [] and b.metadata == {} and a.spec_info is not b.spec_info
    assert a.status is CompatSample.Status.PENDING and a.loss_mask is None and not a.remove_sample


def test_without_slime_the_plugin_uses_the_stand_in():
    try:
        import slime  # noqa: F401
    except ImportError:
        assert sample_class() is CompatSample
