#!/usr/bin/env bash
# Installs this checkout (editable, with its extras) into $PYTHON unless it is installed already.
# Called by scripts/setup_machine.sh. Skipped when a stamp says this checkout (its path and its
# pyproject.toml) was installed into this interpreter AND the swe_rl that interpreter imports (from
# outside the checkout) is this checkout's; so a second clone on the same machine installs itself
# instead of silently running the first clone's code. SWE_REINSTALL=1 forces the install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
EXTRAS="${SWE_INSTALL_EXTRAS:-dev,eval,minisweagent}"
python_path="$(command -v "$PYTHON")" || { echo "error: no $PYTHON on PATH" >&2; exit 1; }
checkout="$(pwd -P)"
stamp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/swe-rl"
key="$( (cat pyproject.toml; echo "$python_path" "$checkout" "$EXTRAS") | sha256sum | cut -c1-16)"
stamp="$stamp_dir/pip-$key"

# Where the interpreter finds swe_rl, asked from / (from the checkout, its own folder would shadow
# whatever is installed) and without PYTHONPATH.
installed="$(cd / && env -u PYTHONPATH "$python_path" -c \
  'import pathlib, swe_rl; print(pathlib.Path(swe_rl.__file__).resolve().parent.parent)' 2>/dev/null)" ||
  installed=""

if [[ -f "$stamp" && "${SWE_REINSTALL:-0}" != "1" && "$installed" == "$checkout" ]]; then
  exit 0
fi
if [[ -n "$installed" && "$installed" != "$checkout" ]]; then
  echo "[setup] the swe_rl of $PYTHON is the one in $installed; installing this checkout ($checkout)"
fi
echo "[setup] pip install -e .[$EXTRAS]"
"$python_path" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
mkdir -p "$stamp_dir" && touch "$stamp"

# swebench 4.1.0 beside the pinned 5.x, in a folder of its own (not on sys.path): the tests of older rows,
# whose eval scripts come from 4.x's repo/version specs (5.x has none), put it first for their duration
# (tests/swebench_versions.py). Once per machine.
side="$stamp_dir/swebench-4.1.0"
if [[ ! -f "$side/swebench/__init__.py" ]]; then
  echo "[setup] swebench 4.1.0 into $side (tests of older rows)"
  rm -rf "$side.tmp"
  # best effort: without it those tests skip, saying so (no package index here is not a set-up failure)
  if "$python_path" -m pip install -q --disable-pip-version-check --no-deps --target "$side.tmp" swebench==4.1.0; then
    rm -rf "$side" && mv "$side.tmp" "$side"
  else
    rm -rf "$side.tmp"; echo "[setup] warning: swebench 4.1.0 not installed; the tests of older rows will skip" >&2
  fi
fi
