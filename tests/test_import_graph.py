"""The project's modules import each other in one direction only (HOW_WE_WORK: "imports must not
run in circles").

Both rules read the source with :mod:`ast`, so they hold for every module whether or not a test
imports it: a project import inside a function (which hides a cycle until that function runs) is
refused, and the module-level import graph must be acyclic (:class:`graphlib.TopologicalSorter`).
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("components", "loadgen", "steptime", "testbed")
COMMAND_MODULES = frozenset(
    {
        "testbed.entry",
        "testbed.stack_commands",
        "testbed.compare",
        "testbed.init_stack",
        "testbed.probe_command",
        "loadgen.cli",
    }
)
"""The modules whose functions are `testbed`'s commands. They are read for every `--help`, so
each command imports what it runs inside its function (tests/test_cli_help.py); those imports
still count in the cycle check below (``_imports`` adds them to the graph)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(path): path for package in PACKAGES for path in (REPO / package).rglob("*.py")
}


def _imported(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The project modules an import statement loads (``from components import x`` -> x)."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif node.level or node.module is None:
        raise AssertionError(f"relative import at line {node.lineno}: use absolute imports")
    else:
        names = {
            f"{node.module}.{alias.name}"
            if f"{node.module}.{alias.name}" in MODULES
            else node.module
            for alias in node.names
        }
    return {name for name in names if name.split(".")[0] in PACKAGES}


def _imports(tree: ast.Module) -> tuple[set[str], list[str]]:
    """(project modules imported, ``line: module`` of those imported inside a def/class)."""
    top: set[str] = set()
    nested: list[str] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                modules = _imported(child)
                top.update(modules)
                if inside:
                    nested.extend(f"line {child.lineno}: {m}" for m in sorted(modules))
            defines = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            visit(child, inside or defines)

    visit(tree, inside=False)
    return top, nested


GRAPH = {name: _imports(ast.parse(path.read_text(), str(path))) for name, path in MODULES.items()}


def test_the_packages_are_found() -> None:
    assert {"components.config", "components.checks", "loadgen.runner", "testbed.render"} <= set(
        MODULES
    )
    assert "components.config" in GRAPH["components.checks"][0]


STEP_RUNTIME = {"components.load_provider", "components.cluster_read"}
"""Modules that import a step's runtime inside the functions that run it: the load step's
(grid runner, pod watch, report) and the cluster check's (the `kubernetes` client, through
loadgen.kube_watch). ``pulumi preview``/``up`` import the program, and a module-level import
there costs seconds of CPU (tests/test_program_imports.py, bench/program_import.py). Those
imports still count in the cycle check below (``_imports`` keeps every import)."""


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_project_import_inside_a_function(module: str) -> None:
    nested = GRAPH[module][1]
    if module in STEP_RUNTIME | COMMAND_MODULES:
        assert nested, f"{module} is exempt but imports nothing inside a function"
        return
    assert not nested, f"{module} imports project modules inside a def/class: {nested}"


def test_step_runtime_imports_count_in_the_cycle_check() -> None:
    assert "loadgen.runner" in GRAPH["components.load_provider"][0]


def test_the_import_graph_has_no_cycle() -> None:
    sorter = TopologicalSorter({name: deps for name, (deps, _) in GRAPH.items()})
    try:
        order = list(sorter.static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
    # The model comes before the checks, which come before the validation that runs them.
    assert order.index("components.config") < order.index("components.checks")
    assert order.index("components.checks") < order.index("components.validation")


def test_a_cycle_would_be_found() -> None:
    """The cycle this test guards against (config -> checks -> config) is reported."""
    sorter = TopologicalSorter({"a.config": {"a.checks"}, "a.checks": {"a.config"}})
    with pytest.raises(CycleError):
        sorter.prepare()
