"""Standalone evaluation: run an endpoint on SWE tasks, grade predictions, certify instances, report.

Each tool is a console script (``swe-eval``, ``swe-grade``, ``swe-certify``, ...; see pyproject.toml).
"""
