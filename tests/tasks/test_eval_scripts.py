"""Eval scripts: from the row, around R2E-Gym's run_tests.sh, or built offline by swebench (swe_rl.tasks.eval_scripts)."""

from __future__ import annotations

import socket
import sys

import pytest
from task_rows import TEST_PATCH, fixture_row, r2e_row, swebench_row

from swe_rl.tasks import (
    EvalSpecUnavailable,
    eval_script_for,
    instance_from_row,
    official_script,
)


@pytest.fixture
def offline(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def needs_swebench_5():
    pytest.importorskip("swebench")
    try:
        from swebench.harness.utils import make_test_spec
    except ImportError:
        pytest.skip("swebench 4.x installed: this compares with 5.x (pip install swebench==5.0.2)")
    return make_test_spec


def test_swebench_generates_the_eval_script_offline(offline, swebench_4):
    from swebench.harness.test_spec.test_spec import make_test_spec

    inst = instance_from_row(swebench_row())
    script = eval_script_for(inst)
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
    assert "git apply -v - <<'EOF_114329324912'" in script and TEST_PATCH in script
    assert ": '>>>>> Start Test Output'\npytest -rA tests/test_requests.py\n" in script
    # psf/requests needs no downloads, so the full official TestSpec agrees byte for byte
    assert script == make_test_spec(swebench_row()).eval_script


def test_eval_script_for_a_repo_whose_full_spec_would_download(offline, swebench_4):
    row = swebench_row(
        instance_id="django__django-11099", repo="django/django", version="3.0",
        test_patch=TEST_PATCH.replace("tests/test_requests.py", "tests/auth_tests/test_validators.py"),
    )  # fmt: skip
    script = eval_script_for(instance_from_row(row))
    assert "./tests/runtests.py --verbosity 2" in script and "auth_tests.test_validators" in script


def test_eval_spec_unavailable_is_clear(monkeypatch, swebench_4):
    with pytest.raises(EvalSpecUnavailable, match="unknown to swebench"):
        eval_script_for(instance_from_row(swebench_row(repo="getmoto/moto")))
    with pytest.raises(EvalSpecUnavailable, match="no specs for psf/requests version '9.9'"):
        eval_script_for(instance_from_row(swebench_row(version="9.9")))
    with pytest.raises(EvalSpecUnavailable, match="could not build"):
        eval_script_for(instance_from_row(swebench_row(test_patch="diff --git a/x b/x\n@@ -1,5 +1,5 @@\n")))


def test_without_swebench_only_rows_with_scripts_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "swebench.harness.constants", None)
    with pytest.raises(EvalSpecUnavailable, match="swe-convert-rows"):
        eval_script_for(instance_from_row(swebench_row()))
    assert eval_script_for(instance_from_row(fixture_row())).startswith("#!/bin/bash")


def test_r2e_eval_script_runs_the_image_tests():
    script = eval_script_for(instance_from_row(r2e_row()))
    assert "ln -s /r2e_tests /testbed/r2e_tests" in script
    assert "bash /testbed/run_tests.sh" in script and ">>>>> Start Test Output" in script


def test_official_script_records_the_exit_status_as_swebench_5_does():
    make_test_spec = needs_swebench_5()
    marked = "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA\n: '>>>>> End Test Output'\ngit checkout x\n"
    for row in (fixture_row(), fixture_row(eval_script=marked)):
        spec = make_test_spec(
            {**row, "image": "img", "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}
        )
        assert official_script(row["eval_script"]) == spec.eval_script
    assert "SWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End" in official_script(marked)
