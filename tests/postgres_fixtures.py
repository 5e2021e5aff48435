"""A real PostgreSQL on loopback (Debian's `postgresql` server binaries) for the pool replicas' tests.

`local_postgres`: one server per test session (`swe_rl/testing/local_postgres.py`: initdb in a temporary
directory, as the `postgres` user when the tests run as root; removed at the end). `postgres_url`: a
fresh, empty database on it for one test. Without the binaries the tests skip, saying why; under CI
(`CI` set, where scripts/setup_machine.sh installs `postgresql`) they fail instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from swe_rl.testing.local_postgres import LocalPostgres, postgres_bin_dir


@pytest.fixture(scope="session")
def local_postgres() -> Iterator[LocalPostgres]:
    if postgres_bin_dir() is None:
        reason = "PostgreSQL server binaries not installed (scripts/setup_machine.sh installs `postgresql`)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    pytest.importorskip("psycopg", reason="the `replicas` extra (psycopg) is not installed")
    server = LocalPostgres()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(local_postgres: LocalPostgres) -> str:
    """A fresh database: no lease of another test in it."""
    return local_postgres.new_database("t_" + secrets.token_hex(6))
