"""House rules of the package a newcomer relies on: one class per name, and no test double in production.

- No two classes in `swe_rl/` share a name (a reader who sees `Lease` knows which one it is).
- Production code never imports the test doubles (`swe_rl.testing`, `swe_rl.fleet.fakes`); only those
  packages themselves, the tests and the benchmarks do.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT
from tests.package_sources import module_parts, package_files, parse

TEST_DOUBLES = ("swe_rl.testing", "swe_rl.fleet.fakes")


def class_names(source: str) -> list[str]:
    return [node.name for node in ast.walk(parse(source)) if isinstance(node, ast.ClassDef)]


def duplicate_classes(files: dict[str, str]) -> dict[str, list[str]]:
    """Class name -> the files defining it, for every name defined more than once."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, source in files.items():
        for name in class_names(source):
            where[name].append(path)
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def module_of(path: Path) -> str:
    parts = module_parts(path)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in `source`, relative imports resolved against `module`."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def is_double(module: str) -> bool:
    return any(module == d or module.startswith(d + ".") for d in TEST_DOUBLES)


def test_no_two_classes_in_swe_rl_share_a_name():
    files = {str(p.relative_to(ROOT)): p.read_text() for p in package_files()}
    assert len(files) > 50
    assert duplicate_classes(files) == {}


def test_the_duplicate_check_sees_a_duplicate():
    found = duplicate_classes({"a.py": "class Lease:\n    class Inner: ...\n", "b.py": "class Lease: ...\n"})
    assert found == {"Lease": ["a.py", "b.py"]}


def test_production_code_never_imports_a_test_double():
    bad = []
    for path in package_files():
        module = module_of(path)
        if is_double(module):
            continue
        for line, name in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            if is_double(name):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not bad, bad


def test_the_import_check_resolves_relative_imports():
    source = "from ..testing import fake_openai\nfrom .fakes.docker_client import X\nimport swe_rl.tasks\n"
    found = [name for _, name in imported_modules(source, "swe_rl.fleet.client", is_package=False)]
    assert "swe_rl.testing.fake_openai" in found and "swe_rl.fleet.fakes.docker_client" in found
    assert is_double("swe_rl.testing") and is_double("swe_rl.fleet.fakes.simulated_fleet")
    assert not is_double("swe_rl.testing_tools") and not is_double("swe_rl.tasks")


def test_no_two_test_modules_share_a_file_name():
    """Test folders have no __init__.py: pytest imports each test module by its file name alone, so two
    `test_x.py` in different folders stop the whole collection ("import file mismatch")."""
    names: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
