"""Stage 1: the patch as data — the canonical patch `git apply` accepts, its files and hunks, the baseline.

Entry: `canonicalise` (`canonical`), re-taking the agent's text as the one patch later stages judge.
`split` cuts unified diffs into file diffs and hunks; `baseline` records what a repository holds before
anyone acts, so a later diff is the change only.

(Only a docstring here: the base modules `result`, `integrity` and `logs` import leaf modules of
this package, so the package itself imports nothing; callers import the entry module.)
"""
