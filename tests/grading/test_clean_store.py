"""The clean-tree store (`grading.clean_store`): a task's clean-tree answers asked in one process serve the
first grading of the same task in another, only on the same image ID, task and grader code; a void on
them is checked live (`pipeline.grade_patch`, in tests/grading/test_clean_store_fleet.py)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from swe_rl.fleet.client import ExecResult
from swe_rl.grading import clean_store, prerun
from swe_rl.grading.clean_store import CleanStore, StoredClean, store_for
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.runner.probe import ProbeReport
from swe_rl.tasks import eval_script_for, load_instances

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "instances.jsonl"
SIGNED = ProbeReport(collected={"plugins": ["x"]}, finished={"plugins": ["x"]}, path=["/testbed"])


@pytest.fixture(scope="module")
def instance():
    return load_instances(FIXTURES, instance_ids=["jpvanhal__inflection-9001"]).instances[0]


@pytest.fixture(autouse=True)
def _a_fresh_process(monkeypatch):
    """Nothing kept in the process; reports that say ``ok`` are signed ones, and no env store."""
    prerun.forget_clean_trees()
    monkeypatch.delenv(clean_store.STORE_ENV, raising=False)
    monkeypatch.setattr(
        prerun, "read_probe_report", lambda text, plan: SIGNED if text == "ok" else ProbeReport(error="no")
    )
    yield
    prerun.forget_clean_trees()


def _sections(mine: str, **parts: bytes) -> str:
    return "".join(
        f"--{mine}-{k.replace('_', '-')}--\n{base64.b64encode(v).decode()}\n" for k, v in parts.items()
    )


def _clean_answer(marker: str, mine: str) -> str:
    parts = {"file_0": b"def test_x(): pass\n", "log": b"", "report": b"ok", "done": b""}
    return f"--{marker}-patch--\n\n--{marker}-end--\n" + _sections(mine, **parts)


def _canonical_only(marker: str, mine: str) -> str:
    return f"--{marker}-patch--\n\n--{marker}-end--\n" + _sections(mine, done=b"")


class _Lease:
    """Answers the pre-run bundle's one exec with `make(canonical marker, the bundle's own marker)`."""

    def __init__(self, image_id: str) -> None:
        self.image_id, self.bundle = image_id, ""
        self.make: Any = None

    async def exec(self, command: str, **kw: Any) -> ExecResult:
        self.bundle = command
        done = next(line for line in command.splitlines() if line.endswith("-done--'"))
        end = next(line for line in command.splitlines() if "-end--' " in line)
        marker = end.split("'--", 1)[1].split("-end--", 1)[0]
        output = self.make(marker, done.split("'--", 1)[1].split("-done--", 1)[0])
        return ExecResult(0, output, False, False, len(output), 0.1, "")


def _lease(image_id: str) -> _Lease:
    return _Lease(image_id)


async def _grade(
    instance: Any, lease: _Lease, make: Any, config: GraderConfig, store: bool = True
) -> prerun.CleanTree:
    lease.make = make
    script = eval_script_for(instance)
    return await prerun.read_clean_tree(lease, instance, "PATCH\n", script, config, [], store)  # type: ignore[arg-type]


async def test_a_first_grading_in_another_process_reads_the_stored_answer(instance, monkeypatch, tmp_path):
    config = GraderConfig(clean_store=str(tmp_path))
    first = _lease("sha256:" + "a" * 64)
    asked = await _grade(instance, first, _clean_answer, config)
    assert "clean.sh" in first.bundle and not asked.cached and asked.clean == SIGNED
    assert len(list(tmp_path.glob("*.json"))) == 1  # a complete answer, written

    prerun.forget_clean_trees()  # another process
    second = _lease("sha256:" + "a" * 64)
    got = await _grade(instance, second, _canonical_only, config)
    assert "clean.sh" not in second.bundle and "reader.sh" not in second.bundle  # the canonical patch alone
    assert got.cached and got.stored and got.clean == SIGNED and got.sources == asked.sources
    assert got.probe_plan is not None and asked.probe_plan is not None
    assert got.probe_plan.module == asked.probe_plan.module  # under the stored run's names


@pytest.mark.parametrize("other", ["another image", "no image id", "grader changed", "store off"])
async def test_anything_but_the_same_image_task_and_grader_asks_the_clean_tree(
    instance, monkeypatch, tmp_path, other
):
    config = GraderConfig(clean_store=str(tmp_path))
    await _grade(instance, _lease("sha256:" + "a" * 64), _clean_answer, config)
    prerun.forget_clean_trees()
    image_id, kw = "sha256:" + "a" * 64, {}
    if other == "another image":
        image_id = "sha256:" + "b" * 64
    elif other == "no image id":
        image_id = ""
    elif other == "grader changed":
        monkeypatch.setattr(clean_store, "grader_digest", lambda: "another grader")
    else:
        kw = {"store": False}
    lease = _lease(image_id)
    got = await _grade(instance, lease, _clean_answer, config, **kw)
    assert "clean.sh" in lease.bundle and not got.cached and not got.stored


async def test_a_stored_answer_a_void_rested_on_is_forgotten(instance, monkeypatch, tmp_path):
    config = GraderConfig(clean_store=str(tmp_path))
    await _grade(instance, _lease("sha256:" + "a" * 64), _clean_answer, config)
    prerun.forget_clean_trees()
    got = await _grade(instance, _lease("sha256:" + "a" * 64), _canonical_only, config)
    assert got.stored and got.stored in prerun._kept[next(iter(prerun._kept))].stored
    prerun.forget_stored(config, got.stored)
    assert not prerun._kept and not list(tmp_path.glob("*.json"))
    lease = _lease("sha256:" + "a" * 64)
    await _grade(instance, lease, _clean_answer, config)
    assert "clean.sh" in lease.bundle  # asked live again, and written again
    assert len(list(tmp_path.glob("*.json"))) == 1


async def test_an_answer_this_process_kept_is_written_when_the_store_lacks_it(instance, tmp_path):
    """Certification in a process that graded the task before: its kept answer goes to the store, under
    the image ID it was asked on only."""
    asked_on = "sha256:" + "a" * 64
    await _grade(instance, _lease(asked_on), _clean_answer, GraderConfig(clean_store=""))
    assert not list(tmp_path.glob("*.json"))
    config = GraderConfig(clean_store=str(tmp_path))
    other = _lease("sha256:" + "b" * 64)
    await _grade(instance, other, _canonical_only, config)  # (the process's answer serves, as before)
    assert "clean.sh" not in other.bundle and not list(tmp_path.glob("*.json"))  # not under another ID
    same = _lease(asked_on)
    got = await _grade(instance, same, _canonical_only, config)
    assert got.cached and not got.stored and len(list(tmp_path.glob("*.json"))) == 1
    prerun.forget_clean_trees()
    later = await _grade(instance, _lease(asked_on), _canonical_only, config)
    assert later.stored and later.clean == SIGNED


async def test_an_incomplete_answer_is_not_written(instance, monkeypatch, tmp_path):
    config = GraderConfig(clean_store=str(tmp_path))

    def unsigned(marker: str, mine: str) -> str:
        parts = {"file_0": b"def test_x(): pass\n", "log": b"", "report": b"forged", "done": b""}
        return f"--{marker}-patch--\n\n--{marker}-end--\n" + _sections(mine, **parts)

    got = await _grade(instance, _lease("sha256:" + "a" * 64), unsigned, config)
    assert got.clean is not None and got.clean.error
    assert not list(tmp_path.glob("*.json"))


def test_a_file_that_does_not_parse_or_names_another_key_is_a_miss(tmp_path):
    store = CleanStore(tmp_path)
    key = CleanStore.key("task", "{}", "sha256:1")
    assert key != CleanStore.key("task", "{}", "sha256:2") != CleanStore.key("task", '{"a": 1}', "sha256:1")
    answer = StoredClean(
        key=key, names=("m", "/tmp/d"), sources={}, clean=SIGNED, language_plan=None, language_clean=None
    )
    store.put(answer)
    assert store.get(key) == answer
    other = CleanStore.key("task", "{}", "sha256:2")
    (tmp_path / f"{key}.json").rename(tmp_path / f"{other}.json")  # a file under another key's name
    assert store.get(other) is None
    (tmp_path / f"{key}.json").write_text('{"format": 1, "key": "')  # half a file
    assert store.get(key) is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]  # nothing half-written left


def test_an_unwritable_store_is_skipped_not_a_failure(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    store = CleanStore(blocked / "store")  # under a file: mkdir fails
    store.put(
        StoredClean(key="k", names=None, sources={}, clean=None, language_plan=None, language_clean=None)
    )
    assert store.get("k") is None


def test_the_store_directory_comes_from_the_config_else_the_environment(monkeypatch, tmp_path):
    assert store_for(None) is None and store_for("") is None
    monkeypatch.setenv(clean_store.STORE_ENV, str(tmp_path / "env"))
    assert store_for(None).root == tmp_path / "env"  # type: ignore[union-attr]
    assert store_for("") is None  # '': no store, whatever the environment says
    assert store_for(str(tmp_path / "cfg")).root == tmp_path / "cfg"  # type: ignore[union-attr]


def test_certification_writes_beside_its_ledger_unless_told_otherwise(monkeypatch, tmp_path):
    from swe_rl.eval import certify

    ledger = tmp_path / "ledger.jsonl"
    args = ["run", "--data", "d.jsonl", "--ledger", str(ledger)]
    assert certify.clean_store_of(certify.parse_args(args)) == f"{ledger}.clean-trees"
    assert certify.clean_store_of(certify.parse_args([*args, "--clean-store", "none"])) == ""
    assert certify.clean_store_of(certify.parse_args([*args, "--clean-store", "/s"])) == "/s"
    monkeypatch.setenv(clean_store.STORE_ENV, "/env")
    assert certify.clean_store_of(certify.parse_args(args)) == "/env"


def test_the_plugin_finds_the_store_beside_its_certification_ledger(tmp_path):
    from swe_rl.slime.config import PluginConfig
    from swe_rl.slime.runtime import clean_store_of

    ledger = tmp_path / "ledger.jsonl"
    certified = PluginConfig(require_certified=str(ledger))
    assert clean_store_of(certified) == ""  # no store written beside it: none
    (tmp_path / "ledger.jsonl.clean-trees").mkdir()
    assert clean_store_of(certified) == f"{ledger}.clean-trees"
    assert clean_store_of(PluginConfig(require_certified=str(ledger), clean_store="/s")) == "/s"
    assert clean_store_of(PluginConfig()) == ""


def test_only_a_void_that_decides_the_grade_is_checked_live():
    """A grade is graded again on live answers only when its tests passed and a record voided it: a patch
    whose tests failed costs one grading, whatever its records say."""
    from swe_rl.grading.integrity import TamperRecord, TamperReport
    from swe_rl.grading.pipeline import _void_decided
    from swe_rl.grading.result import GradeResult, GradeStatus, TestsReport

    void = TamperReport(records=[TamperRecord(path="", rule="runner_probe", action="voided", reason="x")])
    noted = TamperReport(records=[TamperRecord(path="", rule="runner_probe", action="noted", reason="x")])

    def grade(failing: list[str], tamper: TamperReport, status: GradeStatus = GradeStatus.UNRESOLVED):
        tests = TestsReport(success=["t1"], failure=failing)
        return GradeResult(instance_id="i", status=status, resolved=False, fail_to_pass=tests, tamper=tamper)

    config = GraderConfig()
    assert _void_decided(grade([], void), config)
    assert not _void_decided(grade(["t2"], void), config)  # its tests failed: no void decided it
    assert not _void_decided(grade([], noted), config)
    assert not _void_decided(grade([], void, GradeStatus.ENV_ERROR), config)
