"""Shipped configs and templates (YAML, Jinja, JSON); read them through ``swe_rl.resources``."""
