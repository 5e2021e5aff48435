"""Stage 4b: canary tests and nonce markers planted in the run, and the run's log read as evidence.

Entries: `plan_canaries` / `check_canaries` (`plan`: the eval script rewritten with nonce markers and
Python canaries), `plant_language_canaries` (`languages`: Go, JavaScript, Rust canaries). `log_audit`
reads the log's nonce section, every status line and pytest's own report.

(Only a docstring here: the base modules `result`, `integrity` and `logs` import leaf modules of
this package, so the package itself imports nothing; callers import the entry module.)
"""
