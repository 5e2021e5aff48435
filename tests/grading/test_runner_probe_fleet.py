"""The runner probe in real grading containers (issue 36, class 2): the class-2 exploits of
tests/adversarial_patches.py earn nothing on the fixtures, and where the grader's own parser is made to
miss a trick (the ini split of before this round), the probe alone voids it.

``SWE_PROBE_TABLE=<file.json>`` writes the rows of docs/reward_integrity.md.
"""

from __future__ import annotations

import json
import os

import pytest
from adversarial_patches import CLASS_TWO, exploit_patches, graded_all, rotation
from agent_fixtures import FIXTURES_JSONL, leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.grading.scans import runner_config

FIXTURE_IDS = [
    json.loads(line)["instance_id"] for line in FIXTURES_JSONL.read_text().splitlines() if line.strip()
]
PLAYS = rotation(CLASS_TWO, FIXTURE_IDS, per_exploit=1)  # every trick once; all of them: FULL_MATRIX
_TABLE: dict[str, dict[str, object]] = {}


def _record(instance_id: str, name: str, result) -> None:
    _TABLE.setdefault(name, {})[instance_id] = {
        "naive": result.official.status if result.official else None,
        "ours": result.status.value,
        "rules": sorted({r.rule for r in result.tamper.records}) if result.tamper else [],
    }
    if path := os.environ.get("SWE_PROBE_TABLE"):
        with open(path, "w") as fh:
            json.dump(_TABLE, fh, indent=1, sort_keys=True)


@pytest.mark.parametrize("instance_id", [f for f in FIXTURE_IDS if PLAYS[f]])
async def test_class_two_earns_nothing(instance_id, client, pool, fixture_instances, docker_client):
    instance = fixture_instances[instance_id]
    exploits = PLAYS[instance_id]
    patches = await exploit_patches(client, instance, exploits)
    results = await graded_all(FleetGrader(client), instance, [patches[e.name] for e in exploits])
    earned = []
    for exploit, result in zip(exploits, results, strict=True):
        _record(instance_id, exploit.name, result)
        assert result.tamper is not None, exploit.name
        if result.resolved or result.status is GradeStatus.ENV_ERROR:
            earned.append((exploit.name, result.status.value, result.message))
        if not result.tamper.records:
            earned.append((exploit.name, "nothing recorded", result.message))
    assert not earned, earned
    assert not leftover_containers(docker_client, pool)


async def test_the_probe_voids_what_the_parser_misses(
    client, pool, fixture_instances, docker_client, monkeypatch
):
    """The carriage-return trick (pytest 7.2 in the images splits on it) with the grader's parser made blind to it: without the probe (and the twins) the forged run is
    paid (the exploit is real: the canaries come out as planted), with the probe it is void, and gold still
    resolves with no record."""
    instance = fixture_instances["jpvanhal__inflection-9001"]
    exploit = next(e for e in CLASS_TWO if e.name == "ini_line_ending_cr")
    (patch,) = (await exploit_patches(client, instance, [exploit])).values()
    for split in ("runner_lines", "universal_lines"):  # configparser's own split: ``\n`` alone
        monkeypatch.setattr(runner_config, split, lambda text: text)
    # the twins off too: a twin that took its original's name (a coin) is forged with it and voids the run
    no_probe = GraderConfig(integrity=IntegrityConfig(runner_probe=False, twins=False))
    blind = await FleetGrader(client, no_probe).grade(instance, patch)
    probed = await FleetGrader(client).grade(instance, patch)
    gold = await FleetGrader(client).grade(instance, instance.patch)
    _record(instance.instance_id, "ini_line_ending_cr (parser blind)", probed)
    assert blind.resolved, ("the exploit did not work: nothing to show", blind.message)
    assert not probed.resolved and probed.status is GradeStatus.UNRESOLVED, probed.message
    probe = [r for r in probed.tamper.records if r.rule == "runner_probe"]
    assert probe and all(r.action == "voided" for r in probe), probed.tamper.records
    assert any("release_helpers" in r.reason for r in probe), probe
    assert gold.resolved and not gold.tamper.records, gold.tamper
    assert not leftover_containers(docker_client, pool)
