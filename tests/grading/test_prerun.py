"""The pre-run call (`grading.prerun`): one exec answers the canonical patch, the test files and the clean
tree's probe; output the fleet cut is never parsed (the calls are made again one by one)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from swe_rl.fleet.client import ExecResult
from swe_rl.grading import prerun, prerun_script
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.patch.canonical import CanonicalPatch
from swe_rl.grading.runner.probe import ProbeReport
from swe_rl.grading.twins.plant import files_to_read, reader_script
from swe_rl.tasks import eval_script_for, load_instances

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "instances.jsonl"


@pytest.fixture(scope="module")
def instance():
    loaded = load_instances(FIXTURES, instance_ids=["jpvanhal__inflection-9001"])
    return loaded.instances[0]


@pytest.fixture(autouse=True)
def _nothing_kept():
    prerun.forget_clean_trees()
    yield
    prerun.forget_clean_trees()


def _script(instance: Any) -> str:
    return eval_script_for(instance)


def test_the_bundle_is_one_shell_script_carrying_every_part(instance):
    plans = prerun._plans(instance, _script(instance), GraderConfig())
    assert plans.paths and plans.python is not None  # twins on, a pytest row: both parts present
    text = prerun.bundle_script(instance, "PATCH\n", plans, "m" * 16, "n" * 16, [], 600)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    assert text.count("base64 -d >") == 4  # the patch, the canonical script, the reader, the clean probe
    assert "timeout -k 10 600 bash" in text  # the clean probe bounded as its own evaluate was
    bare = prerun.bundle_script(instance, "", prerun._Plans([], None, None), "m" * 16, "n" * 16, [], 600)
    assert subprocess.run(["bash", "-n"], input=bare, text=True).returncode == 0  # an empty `if` is not bash


class _Lease:
    """Speaks the calls the bundle makes (the exec, a write first when it is not the exec's command);
    its exec answers `output`."""

    def __init__(self, output: str, truncated: bool, returncode: int = 0) -> None:
        self.output, self.truncated, self.returncode = output, truncated, returncode
        self.bundle, self.calls = "", 0

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        self.bundle, self.calls = data.decode(), self.calls + 1

    async def exec(self, command: str, **kw: Any) -> ExecResult:
        self.take(command)
        return _result(self)

    def take(self, command: str) -> None:
        self.calls += 1
        if not command.startswith("bash /"):  # the bundle itself is the command
            self.bundle = command


def _result(lease: _Lease) -> ExecResult:
    return ExecResult(
        returncode=lease.returncode,
        output=lease.output,
        timed_out=False,
        truncated=lease.truncated,
        output_bytes=len(lease.output),
        duration=0.1,
        stderr="",
    )


def _markers(bundle: str) -> tuple[str, str]:
    """(the canonical script's marker, the bundle's own) as the bundle names them."""
    done = next(line for line in bundle.splitlines() if line.endswith("-done--'"))
    end = next(line for line in bundle.splitlines() if "-end--' " in line)
    return end.split("'--", 1)[1].split("-end--", 1)[0], done.split("'--", 1)[1].split("-done--", 1)[0]


async def _answer(instance: Any, lease: _Lease, make: Any, monkeypatch: Any) -> prerun.CleanTree:
    """`make(canonical marker, own marker)` -> the exec's output, once the bundle is written."""

    async def exec_(command: str, **kw: Any) -> ExecResult:
        lease.take(command)
        lease.output = make(*_markers(lease.bundle))
        return _result(lease)

    monkeypatch.setattr(lease, "exec", exec_)
    return await prerun.read_clean_tree(lease, instance, "PATCH\n", _script(instance), GraderConfig(), [])


def _sections(mine: str, **parts: bytes) -> str:
    return "".join(
        f"--{mine}-{k.replace('_', '-')}--\n{base64.b64encode(v).decode()}\n" for k, v in parts.items()
    )


async def test_the_answers_are_read_from_the_sections(instance, monkeypatch):
    path = files_to_read(instance)[0]
    canon = "--{m}-patch--\n\n--{m}-end--\n"

    def make(marker: str, mine: str) -> str:
        return canon.format(m=marker) + _sections(
            mine, file_0=b"def test_x():\n    pass\n", log=b"", done=b""
        )

    got = await _answer(instance, _Lease("", False), make, monkeypatch)
    assert got.canonical.applied and got.sources == {path: "def test_x():\n    pass\n"}
    assert got.probe_plan is not None and got.clean is not None
    assert got.clean.error  # no report section: an unsigned, empty report, as a missing file was


async def test_output_the_fleet_cut_is_not_parsed_the_calls_are_made_one_by_one(instance, monkeypatch):
    seen = []

    fallback = prerun.CleanTree(canonical=CanonicalPatch(applied=False))

    async def one_by_one(*args: Any) -> prerun.CleanTree:
        seen.append(args)
        return fallback

    monkeypatch.setattr(prerun, "_one_by_one", one_by_one)
    for truncated, done in ((True, True), (False, False)):
        make = lambda m, n, d=done: f"--{m}-end--\n" + (_sections(n, done=b"") if d else "")  # noqa: E731
        assert await _answer(instance, _Lease("", truncated), make, monkeypatch) is fallback
    assert len(seen) == 2


async def test_a_failed_canonical_script_is_an_error_not_a_fallback(instance, monkeypatch):
    with pytest.raises(ValueError, match="canonical patch script failed"):
        await _answer(
            instance, _Lease("", False, returncode=2), lambda m, n: "not a git work tree", monkeypatch
        )


async def test_a_tasks_clean_tree_is_asked_once_and_only_a_complete_answer_is_kept(instance, monkeypatch):
    path = files_to_read(instance)[0]
    canon = "--{m}-patch--\n\n--{m}-end--\n"
    signed = ProbeReport(collected={"plugins": ["x"]}, finished={"plugins": ["x"]})
    monkeypatch.setattr(
        prerun, "read_probe_report", lambda text, plan: signed if text == "ok" else ProbeReport(error="no")
    )

    def make(report: bytes) -> Any:
        def answer(marker: str, mine: str) -> str:
            parts = {"file_0": b"def test_x(): pass\n", "log": b"", "report": report, "done": b""}
            return canon.format(m=marker) + _sections(mine, **parts)

        return answer

    first = _Lease("", False)
    assert (await _answer(instance, first, make(b"forged"), monkeypatch)).clean.error  # not kept: asked again
    second = _Lease("", False)
    got = await _answer(instance, second, make(b"ok"), monkeypatch)
    assert "clean.sh" in second.bundle and not got.cached and got.clean == signed
    third = _Lease("", False)
    kept = await _answer(
        instance, third, lambda m, n: canon.format(m=m) + _sections(n, done=b""), monkeypatch
    )
    assert "clean.sh" not in third.bundle and "reader.sh" not in third.bundle  # the canonical patch alone
    assert kept.cached and kept.clean == signed and kept.sources == {path: "def test_x(): pass\n"}
    assert kept.probe_plan is not None and got.probe_plan is not None
    assert kept.probe_plan.module == got.probe_plan.module  # the patched run under the kept run's names
    assert kept.probe_plan.key != got.probe_plan.key  # a fresh key per grading
    other = GraderConfig(integrity=GraderConfig().integrity.model_copy(update={"twins": False}))
    fourth = _Lease("", False)
    fourth_lease_answer = make(b"ok")

    async def exec_(command: str, **kw: Any) -> ExecResult:
        fourth.take(command)
        fourth.output = fourth_lease_answer(*_markers(fourth.bundle))
        return _result(fourth)

    monkeypatch.setattr(fourth, "exec", exec_)
    await prerun.read_clean_tree(fourth, instance, "PATCH\n", _script(instance), other, [])
    assert "clean.sh" in fourth.bundle  # another set of stages: another task key


def test_a_row_without_test_patch_gets_its_searched_test_files_in_the_one_call(tmp_path):
    """A Go row whose FAIL_TO_PASS names no file (a mutation row): the reader's search finds the test file
    in the base commit and the one call carries it back (the twins of such rows came from `read_test_files`
    only; the bundle dropped them). The reader and the found lines run in real bash on a real git repo."""
    from swe_rl.tasks.instance import TaskInstance

    repo = tmp_path / "repo"
    repo.mkdir()
    test_go = "package calc\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal()\n\t}\n}\n"
    (repo / "calc_test.go").write_text(test_go)
    (repo / "calc.go").write_text("package calc\n\nfunc Add(a, b int) int { return a + b }\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    row = TaskInstance(
        instance_id="calc-1",
        repo="x/calc",
        problem_statement="p",
        image="x",
        workdir=str(repo),
        fail_to_pass=["TestAdd"],
        log_parser="parse_log_gotest",
    )
    plans = prerun._plans(row, "go test ./...", GraderConfig())
    assert plans.search and plans.reads and not plans.paths
    folder, mine = str(tmp_path / "reader"), "n" * 16
    script = (
        reader_script(row, plans.paths, folder).replace("\nexit 0\n", "\n")
        + "\n".join(prerun_script.found_lines(folder, mine))
        + "\n"
    )
    out = subprocess.run(["bash"], input=script, text=True, capture_output=True, check=True).stdout
    canonical = CanonicalPatch(applied=True)
    got = prerun._finish(plans, canonical, prerun._sections(out, mine), calls=1)
    assert got.sources == {"calc_test.go": test_go}


async def test_a_bundle_is_the_execs_own_command_up_to_its_limit_then_a_file(instance, monkeypatch):
    """One container call for the bundle (it is the exec's command: one argument of a command line holds
    128 KiB), two when it is larger (written to a file, then run)."""
    canon = "--{m}-patch--\n\n--{m}-end--\n"
    make = lambda m, n: canon.format(m=m) + _sections(n, done=b"")  # noqa: E731
    small = _Lease("", False)
    got = await _answer(instance, small, make, monkeypatch)
    assert small.calls == 1 and got.calls == 1 and "base64 -d >" in small.bundle
    prerun.forget_clean_trees()
    large, big = _Lease("", False), "+" + "x" * (prerun.INLINE_MAX + 1) + "\n"

    async def exec_(command: str, **kw: Any) -> ExecResult:
        large.take(command)
        large.output = make(*_markers(large.bundle))
        return _result(large)

    monkeypatch.setattr(large, "exec", exec_)
    got = await prerun.read_clean_tree(large, instance, big, _script(instance), GraderConfig(), [])
    assert large.calls == 2 and got.calls == 2 and len(large.bundle) > prerun.INLINE_MAX


async def test_a_tasks_later_gradings_reuse_its_interpreters_answer(instance, monkeypatch):
    """The image's interpreter is asked on a task's first grading only (its answer depends on the image and
    the clean tree, never on the patch); a first answer without an interpreter is asked again."""
    facts = {"python": "/usr/bin/python3", "version": "3.11.2", "stdlib": ["json"], "distributions": ["pkg"]}
    asked: list[bool] = []

    def answer(python: dict[str, Any] | None) -> Any:
        def make(marker: str, mine: str) -> str:
            part = f"--{marker}-python--\n{base64.b64encode(json.dumps(python).encode()).decode()}\n"
            canon = f"--{marker}-patch--\n\n" + (part if python is not None else "") + f"--{marker}-end--\n"
            return canon + _sections(mine, file_0=b"def test_x(): pass\n", log=b"", report=b"ok", done=b"")

        return make

    async def run(lease: _Lease, python: dict[str, Any] | None) -> prerun.CleanTree:
        got = await _answer(instance, lease, answer(python), monkeypatch)
        canon = base64.b64decode(
            lease.bundle.split("canon.sh <<'", 1)[1].split("\n", 1)[1].split("\nEOF_", 1)[0]
        )
        asked.append(b"-python--" in canon)
        return got

    signed = ProbeReport(collected={"plugins": ["x"]}, finished={"plugins": ["x"]})
    monkeypatch.setattr(prerun, "read_probe_report", lambda text, plan: signed)
    first = await run(_Lease("", False), facts)
    later = await run(_Lease("", False), None)  # not asked: the kept answer stands in
    assert asked == [True, False] and later.cached
    assert later.canonical.interpreter == first.canonical.interpreter and later.canonical.interpreter.python
    prerun.forget_clean_trees()
    await run(_Lease("", False), {**facts, "python": ""})  # no interpreter answered: asked again
    await run(_Lease("", False), facts)
    assert asked[2:] == [True, True]


def test_the_patch_baseline_is_recorded_first_in_the_same_call(tmp_path, monkeypatch, instance):
    """`record_baseline` on: the bundle records the baseline (the fleet's own script) before the canonical
    script reads it; run here for real with git, the container's paths moved into a temporary directory."""
    from canonical_fixtures import make_repo

    from swe_rl.fleet import patch_baseline
    from swe_rl.grading.patch import canonical

    work, base = str(tmp_path / "canon"), str(tmp_path / "baseline")
    moved = patch_baseline.BASELINE_CORE.replace(patch_baseline.BASELINE_DIR, base)
    monkeypatch.setattr(prerun_script, "BASELINE_CORE", moved)
    monkeypatch.setattr(prerun_script, "WORK_DIR", work)
    monkeypatch.setattr(prerun, "WORK_DIR", work)
    monkeypatch.setattr(canonical, "WORK_DIR", work)
    monkeypatch.setattr(canonical, "BASELINE_DIR", base)
    repo = make_repo(tmp_path, {"pkg/core.py": "x = 1\n"})
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("left by the image's install\n")  # untracked, not ignored
    fix = "--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    empty = prerun._Plans([], None, None)
    for baseline in (False, True):
        text = prerun.bundle_script(instance, fix, empty, "m" * 16, "n" * 16, [], 60, baseline=baseline)
        assert (text.find("baseline.sh") < text.find("canon.sh")) if baseline else "baseline.sh" not in text
        res = subprocess.run(["bash", "-c", text], cwd=repo, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert (tmp_path / "baseline" / "tree").exists() is baseline
        canon = canonical.parse_output(res.stdout, "m" * 16)
        assert [(c.path, c.kind) for c in canon.changes] == [("pkg/core.py", "modified")]
    res = subprocess.run(["bash", "-c", text], cwd=tmp_path, capture_output=True, text=True)  # no work tree
    assert (
        res.returncode == 2
        and "no patch baseline" in res.stderr
        and "not inside a git work tree" in res.stderr
    )


async def test_a_groups_gradings_at_the_same_time_ask_the_clean_tree_once(instance, monkeypatch):
    """RL grades a group's patches together: while one grading asks a task's clean tree, the others of the
    task wait for its answer (one clean probe per task, not one per patch); a first answer that is not
    kept (incomplete) lets each waiting grading ask on its own."""
    import asyncio

    signed = ProbeReport(collected={"plugins": ["x"]}, finished={"plugins": ["x"]})
    monkeypatch.setattr(
        prerun, "read_probe_report", lambda text, plan: signed if text == "ok" else ProbeReport(error="no")
    )
    bundles: list[str] = []

    async def group(report: bytes, size: int) -> list[prerun.CleanTree]:
        def lease() -> _Lease:
            one = _Lease("", False)

            async def exec_(command: str, **kw: Any) -> ExecResult:
                one.take(command)
                bundles.append(one.bundle)
                await asyncio.sleep(0.05)  # the first one's call is still out when the others start
                marker, mine = _markers(one.bundle)
                parts = {"file_0": b"def test_x(): pass\n", "log": b"", "report": report, "done": b""}
                one.output = f"--{marker}-patch--\n\n--{marker}-end--\n" + _sections(mine, **parts)
                return _result(one)

            one.exec = exec_  # type: ignore[method-assign]
            return one

        return await asyncio.gather(
            *(
                prerun.read_clean_tree(lease(), instance, "PATCH\n", _script(instance), GraderConfig(), [])
                for _ in range(size)
            )
        )

    got = await group(b"ok", 4)
    assert sum("clean.sh" in b for b in bundles) == 1 and len(bundles) == 4
    assert [g.cached for g in got].count(False) == 1 and all(g.clean == signed for g in got)
    prerun.forget_clean_trees()
    bundles.clear()
    got = await group(b"forged", 3)  # nothing kept: the waiting ones ask too
    assert sum("clean.sh" in b for b in bundles) == 3 and not any(g.cached for g in got)
    assert not prerun._asking
