"""Stage 4a: the test runner asked about itself — its effective configuration and its own machinery.

Entries: `plan_probe` / `probe_records` (`probe`: pytest's configuration through the grader's plugin,
clean tree vs patched run), `plan_language_probe` / `language_probe_records` (`probe_languages`: go, node
and cargo asked of their toolchains), `imported_records` (`guard`, with its in-container half in
`guard_plugin`: the runner's machinery unchanged, every imported module read), `guard_lines` / `machinery_records`
(`machinery`, its in-run sources in `machinery_sources`: the same for node, go and cargo). `command`
reads an eval
script's test command.

(Only a docstring here: the base modules `result`, `integrity` and `logs` import leaf modules of
this package, so the package itself imports nothing; callers import the entry module.)
"""
