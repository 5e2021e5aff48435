"""Dataset tools: task rows to slime JSONL, SWE-bench Verified assets, pivot datasets, image clean-up.

Each tool is a console script (``swe-preprocess``, ``swe-build-pivots``, ...; see pyproject.toml).
"""
