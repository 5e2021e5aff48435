"""Stage 6: the verdict — the strict reading of the log and the integrity verdict from every stage's result.

Entry: `integrity_verdict` (`decide`), with `official_from` (the official verdict kept beside ours) and the
records of the canary and capability stages. `strict` reads an expected test as passed only when the log
says so and nothing contradicts it.

(Only a docstring here: the base modules `result`, `integrity` and `logs` import leaf modules of
this package, so the package itself imports nothing; callers import the entry module.)
"""
