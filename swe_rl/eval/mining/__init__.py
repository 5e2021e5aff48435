"""The task miner (`swe-mine-tasks`): repository history → certified SWE tasks in swebench 5.x's schema.

One module per stage, in the order a commit goes through them:

- `languages`: what a repository is written in, decided from its files, and for each language the
  toolchain image, the test command, the registered log parser and which paths are tests;
- `history`: the commits of a range that touch code and tests together, each split into a gold
  patch (code) and a test patch (tests);
- `build`: the task image, built offline (``--network none``) from the toolchain image with the
  repository at the commit's parent as the single commit of ``/testbed``;
- `validate`: the tests run before and after the gold patch in that image; FAIL_TO_PASS and
  PASS_TO_PASS from the parser's maps; the swebench 5.x row;
- `cli`: the console script: progress, a resumable output, a drops file with every reason, and
  certification of the rows (`swe_rl.eval.certify`: gold ×K, the empty patch, flaky tests).
"""
