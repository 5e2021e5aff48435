"""Files the test run writes, judged in real grading containers (issue 36): a module the code under test
writes at run time and imports by name is scanned like the patch and voids; the naive grader pays it.
Gold with the listing on, on every fixture: `test_every_fixture_gold_resolves_and_conftest_hacks_do_not`
(tests/grading/test_reward_integrity.py) and the multilang fleet tests, which fail on any record."""

from __future__ import annotations

from adversarial_patches import RUN_WRITES, Exploit, _write, exploit_patches
from agent_fixtures import leftover_containers

from swe_rl.grading import GradeStatus
from swe_rl.grading.fleet import FleetGrader


async def test_a_module_written_at_run_time_voids(client, pool, fixture_instances, docker_client):
    instance = fixture_instances["jpvanhal__inflection-9001"]
    (exploit,) = RUN_WRITES
    (patch,) = (await exploit_patches(client, instance, [exploit])).values()
    assert "_pytest" not in patch and "TestReport" not in patch  # the payload is data in the patch
    result = await FleetGrader(client).grade(instance, patch)
    written = [r for r in result.tamper.records if r.rule == "run_written_file"]
    print(result.official.status, result.status.value, [(r.path, r.action, r.reason) for r in written])
    assert result.official.resolved, ("the exploit did not work: nothing to show", result.official.message)
    assert not result.resolved and result.status is GradeStatus.UNRESOLVED, result.message
    assert any(r.path.endswith("_speedups.py") and r.action == "voided" for r in written), (
        result.tamper.records
    )
    assert not leftover_containers(docker_client, pool)


# On import, the module under test drops an import hook into the interpreter's site directory: a later
# interpreter (a test's subprocess) would run it. The directory comes from the clean run's probe (the test
# command's own interpreter), not from asking `python` before the run.
SITE_WRITE = """

import os as _os
import sysconfig as _sc

_dir = _sc.get_paths()["purelib"]
if _os.path.isdir(_dir):
    with open(_os.path.join(_dir, "zz_swe_" + "late.pth"), "w") as _fh:
        _fh.write("import os" + chr(10))
"""


async def test_an_import_hook_written_into_the_site_directory_voids(
    client, pool, fixture_instances, docker_client
):
    instance = fixture_instances["pytoolz__toolz-9001"]
    gold = instance.patch.replace("{", "{{").replace("}", "}}")  # (scripts are str.format templates)
    on_gold = f"git apply - <<'EOF_GOLD'\n{gold}EOF_GOLD\n" + _write("{src_file}", SITE_WRITE, append=True)
    exploit = Exploit("run_written_pth", "gold, and on import a .pth written into site-packages", on_gold)
    (patch,) = (await exploit_patches(client, instance, [exploit])).values()
    result = await FleetGrader(client).grade(instance, patch)
    written = [r for r in result.tamper.records if r.rule == "run_written_file"]
    print(result.official.status, result.status.value, [(r.path, r.action, r.reason) for r in written])
    assert result.official.resolved, result.official.message  # the official walk sees nothing
    assert not result.resolved, result.message
    assert any(r.path.endswith("zz_swe_late.pth") and r.action == "voided" for r in written), (
        result.tamper.records
    )
    assert not leftover_containers(docker_client, pool)
