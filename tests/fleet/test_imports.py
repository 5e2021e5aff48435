"""The fleet package installs alone on a Docker node: it imports nothing of swe_rl outside swe_rl.fleet."""

from __future__ import annotations

import ast

from tests.conftest import ROOT
from tests.package_sources import parse

FLEET = ROOT / "swe_rl" / "fleet"


def outside_imports(source: str, depth: int = 0) -> list[tuple[int, str]]:
    """(line, module) of each import of swe_rl outside swe_rl.fleet; `depth`: packages below swe_rl/fleet."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.ImportFrom):  # relative: outside only when it climbs above swe_rl/fleet
            names = ["swe_rl" if node.level > depth + 1 else "swe_rl.fleet"]
        else:
            continue
        found += [
            (node.lineno, name)
            for name in names
            if (name == "swe_rl" or name.startswith("swe_rl."))
            and name != "swe_rl.fleet"
            and not name.startswith("swe_rl.fleet.")
        ]
    return found


def test_the_fleet_imports_nothing_of_swe_rl_outside_it():
    files = sorted(FLEET.rglob("*.py"))
    assert len(files) > 5
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in files
        for line, name in outside_imports(path.read_text(), len(path.relative_to(FLEET).parts) - 1)
    ]
    assert not bad, bad


def test_the_check_sees_an_outside_import():
    source = (
        "from swe_rl.tasks import x\nimport swe_rl.fleet.protocol\n"
        "from swe_rl import fleet\nfrom .. import y\n"
    )
    assert outside_imports(source) == [(1, "swe_rl.tasks"), (3, "swe_rl"), (4, "swe_rl")]
    assert outside_imports("from ..protocol import x\n", depth=1) == []


def test_only_the_docker_backend_imports_docker_py_in_the_exec_server():
    """The exec server talks to `NodeBackend` (exec/backend.py); docker-py stays inside the Docker backend."""
    bad = []
    for path in sorted((FLEET / "exec").rglob("*.py")):
        if path.name in ("docker_backend.py", "docker_exec.py"):
            continue
        for node in ast.walk(parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [
                f"{path.name}:{node.lineno}: {n}" for n in names if n == "docker" or n.startswith("docker.")
            ]
    assert not bad, bad


def test_the_client_needs_no_signing_library():
    """Only the servers sign and verify lease credentials (`cryptography`, the `server` extra): the client,
    which the slime plugin imports on every rollout worker, passes them on as opaque strings."""
    import subprocess
    import sys

    code = "import sys, swe_rl.fleet.client; assert 'cryptography' not in sys.modules, 'client imported it'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
