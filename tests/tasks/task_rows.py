"""Hand-made rows in the shapes of SWE-bench, our fixtures and R2E-Gym, for the tests of swe_rl.tasks."""

from __future__ import annotations

import json

TEST_PATCH = """\
diff --git a/tests/test_requests.py b/tests/test_requests.py
--- a/tests/test_requests.py
+++ b/tests/test_requests.py
@@ -1,1 +1,2 @@
 import requests
+import pytest
"""


def swebench_row(**over) -> dict:
    """A SWE-bench row as the dataset stores it: test lists JSON-encoded."""
    row = {
        "repo": "psf/requests",
        "instance_id": "psf__requests-2317",
        "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "patch": "diff --git a/requests/sessions.py b/requests/sessions.py\n",
        "test_patch": TEST_PATCH,
        "problem_statement": "method = builtin_str(method) problem",
        "hints_text": "",
        "created_at": "2014-11-01T02:20:16Z",
        "version": "2.4",
        "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
        "PASS_TO_PASS": '["test_requests.py::RequestsTestCase::test_basic_building"]',
        "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
    }
    row.update(over)
    return row


def fixture_row(**over) -> dict:
    """A row of data/fixtures/instances.jsonl: SWE-bench fields plus image and eval script."""
    row = {
        "instance_id": "pytoolz__toolz-9001",
        "repo": "pytoolz/toolz",
        "base_commit": "abc123",
        "problem_statement": "partition_all drops the tail",
        "patch": "diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py\n",
        "test_patch": "",
        "FAIL_TO_PASS": ["toolz/tests/test_itertoolz.py::test_partition_all"],
        "PASS_TO_PASS": ["toolz/tests/test_itertoolz.py::test_remove"],
        "version": "0.12",
        "image_name": "swe-rl/fixture-pytoolz__toolz-9001:latest",
        "eval_script": "#!/bin/bash\ncd /testbed && pytest -rA\n",
        "workdir": "/testbed",
        "data_source": "swe-rl-fixtures",
    }
    row.update(over)
    return row


def r2e_row(**over) -> dict:
    commit = {
        "file_diffs": [],
        "old_commit_hash": "1111111111111111111111111111111111111111",
        "new_commit_hash": "2222222222222222222222222222222222222222",
        "commit_message": "BUG: fix to_csv na_rep",
        "commit_date": "2020-01-01T00:00:00",
        "metadata": {},
    }
    row = {
        "repo_name": "pandas",
        "docker_image": "namanjain12/pandas_final:2222222222222222222222222222222222222222",
        "commit_hash": "2222222222222222222222222222222222222222",
        "parsed_commit_content": json.dumps(commit),
        "execution_result_content": "{}",
        "modified_files": ["pandas/io/formats/csvs.py"],
        "relevant_files": [],
        "num_non_test_files": 1,
        "prompt": "...",
        "problem_statement": "[ISSUE]to_csv ignores na_rep[/ISSUE]",
        "expected_output_json": json.dumps({"TestFrame.test_to_csv_na": "PASSED"}),
    }
    row.update(over)
    return row


def write_jsonl(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
