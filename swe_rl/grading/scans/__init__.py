"""Stages 2 and 3: what the grader reads of the patched tree before and after the run.

Entries: `judge_tree` (`tree`: the tree the canonical patch produces, with `tree_languages` for Go,
JavaScript and Rust, `runner_config` and `config_lines` for the runner's settings), `scan_changes`
(`capabilities`: the syntax tree of the added code) and `plan_writes` / `written_records`
(`run_writes`: files the test run wrote, judged like the patch).

(Only a docstring here: the base modules `result`, `integrity` and `logs` import leaf modules of
this package, so the package itself imports nothing; callers import the entry module.)
"""
