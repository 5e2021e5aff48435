"""Stage 4c: twins of the task's own FAIL_TO_PASS tests, which no honest fix passes.

Entries: `plan_twins` / `plant_twins` / `check_twins` (`plant`). `python` derives a Python test's twins
through its syntax tree (`placement`: where a twin may go; `cases`: the few parameter sets it keeps; `names`:
its name and its helpers', of the file's own words) and
`forms` turns each assertion form into its twin's; `languages` cuts Go,
JavaScript and Rust twins from the test file's text; `plan` is what one run plants.

(Only a docstring here: the base modules `result`, `integrity` and `logs` import leaf modules of
this package, so the package itself imports nothing; callers import the entry module.)
"""
