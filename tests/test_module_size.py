"""Files of a few hundred lines: no module of the package passes `MAX_LINES`.

A module past it holds more than one job; split one cohesive part out into a module next to it (its
own docstring saying its one job) and name it in docs/architecture.md. The limit counts every line
(docstrings and blank lines included), as `wc -l` does.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT
from tests.package_sources import package_files

MAX_LINES = 500


def line_count(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def oversized(paths: list[Path], limit: int = MAX_LINES) -> dict[str, int]:
    """Repository-relative path -> lines, for every file longer than `limit`."""
    counts = {path: line_count(path) for path in paths}
    return {str(path.relative_to(ROOT)): n for path, n in counts.items() if n > limit}


def test_no_module_passes_the_line_limit() -> None:
    files = package_files()
    assert len(files) > 100  # the walk found the package, not an empty folder
    over = oversized(files)
    assert not over, f"modules over {MAX_LINES} lines (split one job out of each): " + ", ".join(
        f"{path} ({n})" for path, n in sorted(over.items())
    )


def test_the_check_names_an_oversized_module() -> None:
    big = ROOT / "swe_rl" / "metrics" / "rollout.py"  # a real module, measured against a limit it passes
    assert oversized([big], limit=10) == {"swe_rl/metrics/rollout.py": line_count(big)}
    assert oversized([big]) == {}
