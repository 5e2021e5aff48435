#!/usr/bin/env bash
# The test command: sets up the machine (scripts/setup_machine.sh), then runs the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/fleet -x`.
# SWE_TEST_TIER=fast runs only the fast tier (-m "not docker and not slow": no daemon, no machine set-up,
# no packaging/shellcheck/subprocess-heavy tests); the default runs everything, both markers included, in
# SWE_TEST_WORKERS (default 3) pytest-xdist workers.
# Both first run the linters (ruff check, ruff format --check, mypy; config in pyproject.toml) and stop
# on the first failure. The full run lists its 25 slowest tests (--durations=25), so CI shows them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
lint() {
    "${PYTHON:-python3}" -m ruff check .
    "${PYTHON:-python3}" -m ruff format --check .
    "${PYTHON:-python3}" -m mypy
}
if [[ "${SWE_TEST_TIER:-all}" == fast ]]; then
    lint
    exec "${PYTHON:-python3}" -m pytest -q -ra -m "not docker and not slow" "$@"
fi
bash scripts/setup_machine.sh
lint
# The Docker tier mostly waits on containers, not on the cores: SWE_TEST_WORKERS pytest-xdist workers (default
# 3, 0 = one process) share the tests, each taking the next when it finishes one (--dist worksteal).
workers=${SWE_TEST_WORKERS:-3}
parallel=()
[[ "$workers" != 0 ]] && parallel=(-n "$workers" --dist worksteal)
exec "${PYTHON:-python3}" -m pytest -q -ra --durations=25 "${parallel[@]}" "$@"
