"""The runtime dependencies are exactly what the program imports.

``pulumi up`` installs ``[project] dependencies`` on every workstation (``tests/cli_rules``,
``test_workstation_install.py``); tests, ``bench/`` and the simulation's Dynamo belong to a
dependency group. Both directions are read from the source with :mod:`ast` (imports inside
functions count: a command imports what only it needs where it runs).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT_PACKAGES = set(PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
"""The program's own packages (what the wheel holds: components, loadgen, testbed, ...)."""
RUNTIME_CODE = [*(REPO / package for package in sorted(PROJECT_PACKAGES)), REPO / "__main__.py"]

USED_WITHOUT_IMPORT = {
    # pandas reads and writes requests.parquet through pyarrow (pandas.read_parquet / to_parquet,
    # engine "auto" tries pyarrow first) without an import statement of ours.
    "pyarrow": "pandas' parquet engine",
}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_dependencies() -> set[str]:
    project = PYPROJECT["project"]
    return {
        _normalized(re.split(r"[ <>=!~;\[]", dep, maxsplit=1)[0]) for dep in project["dependencies"]
    }


def imported_modules() -> set[str]:
    """Top-level names of every module the runtime code imports (not the project's own)."""
    files = [p for root in RUNTIME_CODE for p in ([root] if root.is_file() else root.rglob("*.py"))]
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names - PROJECT_PACKAGES - set(sys.stdlib_module_names)


PROVIDED_WHERE_USED = {
    # `testbed probe kv-path` copies KV blocks with the GPU server's own torch (vLLM's), and
    # says it skipped the copy part where torch is absent (kvpath/probe/gpu_part.py).
    "torch": "the GPU server's vLLM install",
    # Measured step times on datacenter GPUs read aiconfigurator-core where the `calibrate` group
    # installed it (Linux x86_64); without it every step is the roofline's, said once
    # (steptime/measured.py `core_installed`).
    "aiconfigurator_core": "the calibrate dependency group",
}


def imported_distributions() -> set[str]:
    by_module = packages_distributions()
    modules = imported_modules() - set(PROVIDED_WHERE_USED)
    return {_normalized(dist) for module in modules for dist in by_module[module]}


def test_every_runtime_dependency_is_imported_by_the_program() -> None:
    unused = runtime_dependencies() - imported_distributions() - set(USED_WITHOUT_IMPORT)
    assert not unused, f"runtime dependencies the program never imports (move to a group): {unused}"


def test_everything_the_program_imports_is_a_runtime_dependency() -> None:
    missing = imported_distributions() - runtime_dependencies()
    assert not missing, f"imported by the program but not in [project] dependencies: {missing}"


def test_test_only_clients_are_not_runtime_dependencies() -> None:
    """httpx and httpx-sse: only tests and bench/ import them (loadgen speaks aiohttp)."""
    assert not {"httpx", "httpx-sse"} & runtime_dependencies()
    assert "httpx" not in imported_modules()
