"""The clean-tree store on a real local fleet: the node reports the container's image ID through the pool to
the lease, certification's gold grading writes the task's clean-tree answers, a later process's first
grading reads them (no clean run), a stored answer a void would rest on is checked live, and exploits
graded on stored answers earn nothing."""

from __future__ import annotations

import json
from typing import Any

from adversarial_patches import CLASS_TWO, RUNNER_GUARD, exploit_patches, graded_all
from agent_fixtures import leftover_containers

from swe_rl.grading import prerun
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.grading.scans.capabilities import CapabilityConfig
from swe_rl.grading.scans.capabilities.catalogue import CAPABILITIES

INSTANCE = "jpvanhal__inflection-9001"
PLAYED = {"ini_line_ending_cr", "ini_precedence_pytest_ini", "helper_returned_report_class", "pycache_module"}
"""Two exploits of the runner's configuration, two of its machinery (each suite plays them all)."""


def _spy(monkeypatch: Any) -> list[bool]:
    """Whether each grading's pre-run bundle asked the clean tree (its probe's collect-only run)."""
    asked: list[bool] = []
    real = prerun.bundle_script

    def bundle(instance: Any, patch: str, plans: Any, *args: Any, **kw: Any) -> str:
        asked.append(bool(plans.clean_script))
        return real(instance, patch, plans, *args, **kw)

    monkeypatch.setattr(prerun, "bundle_script", bundle)
    return asked


async def test_the_lease_reports_the_image_id_the_node_made_it_from(client, fixture_instances, docker_client):
    instance = fixture_instances[INSTANCE]
    async with client.lease(
        instance.image, instance_id=instance.instance_id, workdir=instance.workdir
    ) as lease:
        assert lease.image_id and lease.image_id == docker_client.images.get(instance.image).id


async def test_a_later_process_reads_certifications_answers_and_a_void_on_them_is_asked_live(
    client, pool, fixture_instances, docker_client, monkeypatch, tmp_path
):
    instance = fixture_instances[INSTANCE]
    config = GraderConfig(clean_store=str(tmp_path))
    asked = _spy(monkeypatch)
    prerun.forget_clean_trees()
    try:
        certified = await FleetGrader(client, config).grade(instance, instance.patch)  # certification's run
        assert certified.resolved and not certified.tamper.records, certified.message
        (stored,) = tmp_path.glob("*.json")
        assert asked == [True]

        prerun.forget_clean_trees()  # a rollout process starts
        later = await FleetGrader(client, config).grade(instance, instance.patch)
        assert later.resolved and not later.tamper.records, later.message
        assert asked == [True, False]  # its first grading ran no clean probe

        answer = json.loads(stored.read_text())  # a stored answer that disagrees with the image
        answer["clean"]["collected"]["swe_test_not_in_the_image"] = "x"
        stored.write_text(json.dumps(answer))
        prerun.forget_clean_trees()
        checked = await FleetGrader(client, config).grade(instance, instance.patch)
        assert checked.resolved and not checked.tamper.records, checked.message  # gold: no false trip
        assert asked == [True, False, False, True]  # voided on the stored answer, then asked live
        assert "swe_test_not_in_the_image" not in stored.read_text()  # the live answer replaced it
    finally:
        prerun.forget_clean_trees()
    assert not leftover_containers(docker_client, pool)


async def test_exploits_graded_on_stored_answers_earn_nothing(
    client, pool, fixture_instances, docker_client, monkeypatch, tmp_path
):
    """The runner-configuration and runner-machinery exploits, with the twins and the capability scan off
    so the probe's comparison with the clean tree decides: graded by a process whose clean-tree answers
    came from certification's store, none earns a reward."""
    instance = fixture_instances[INSTANCE]
    blind = IntegrityConfig(
        twins=False, capabilities=CapabilityConfig(actions={name: "ignore" for name in CAPABILITIES})
    )
    config = GraderConfig(clean_store=str(tmp_path), integrity=blind)
    chosen = [e for e in [*CLASS_TWO, *RUNNER_GUARD] if e.name in PLAYED]
    patches = await exploit_patches(client, instance, chosen, concurrency=2)
    asked = _spy(monkeypatch)
    prerun.forget_clean_trees()
    try:
        certified = await FleetGrader(client, config).grade(instance, instance.patch)
        assert certified.resolved, certified.message
        prerun.forget_clean_trees()  # a rollout process starts
        grader = FleetGrader(client, config)
        results = await graded_all(grader, instance, [patches[e.name] for e in chosen], concurrency=2)
    finally:
        prerun.forget_clean_trees()
    assert asked[0] and not asked[1]  # certification asked the clean tree; the first exploit read the store
    earned = [(e.name, r.status.value, r.message) for e, r in zip(chosen, results, strict=True) if r.resolved]
    assert not earned, earned
    assert all(r.tamper.records for r in results)
    assert not leftover_containers(docker_client, pool)
