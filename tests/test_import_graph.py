"""The project's modules import each other in one direction only (HOW_WE_WORK: "imports must not
run in circles").

Both rules read the source with :mod:`ast`, so they hold for every module whether or not a test
imports it: a project import inside a function (which hides a cycle until that function runs) is
refused, and the module-level import graph must be acyclic (:class:`graphlib.TopologicalSorter`).
The packages stand in layers (docs/layout.md): a module imports only modules of its own layer or
of one below, and the stack model and the pure Kubernetes objects import neither Pulumi nor a
Kubernetes client.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS: tuple[tuple[str, ...], ...] = (
    ("configkeys", "metrics"),
    ("workload",),
    ("measurement",),
    ("outputs",),
    ("loadgen", "kvpath", "formats"),
    ("kubeclient", "steptime"),
    ("stackmodel",),
    ("manifests", "incluster"),
    ("clusterread", "loadstep", "simulator"),
    ("recommend",),
    ("components",),
    ("testbed",),
)
"""The project's packages from the ground up (docs/layout.md draws them): the config keys'
vocabulary and the metric registry; the workload (load settings, the SLO); the measurement
(records to figures); the outputs (results folder, tables, reports); the load client, the KV
path's cost model and the field's result formats; the Kubernetes client and the step-time
model; the model of a stack; what is built from it without Pulumi (Kubernetes objects, the
in-cluster load and probe); the cluster
reads, the load step and the simulator; the search over topologies that times candidates with the
simulator; the Pulumi components and the program; the ``testbed`` commands."""
PACKAGES = tuple(package for layer in LAYERS for package in layer)
LAYER_OF = {package: index for index, layer in enumerate(LAYERS) for package in layer}
PURE = (
    "configkeys",
    "metrics",
    "workload",
    "measurement",
    "outputs",
    "kvpath",
    "formats",
    "steptime",
    "stackmodel",
    "manifests",
    "loadstep",
    "simulator",
    "recommend",
)
"""Packages (or modules) that import no Pulumi and no Kubernetes client, anywhere in them."""
FORBIDDEN = ("pulumi", "pulumi_kubernetes", "kubernetes", "grpc")
COMMAND_MODULES = frozenset(
    {
        "testbed.entry",
        "testbed.stack_options",
        "testbed.render_command",
        "testbed.diff_command",
        "testbed.simulate_command",
        "testbed.compare",
        "testbed.init_stack",
        "testbed.load_role",
        "testbed.probe_command",
        "testbed.calibrate_command",
        "testbed.report_command",
        "testbed.load_command",
        "testbed.serve_command",
        "testbed.recommend_command",
        "testbed.export_command",
        "testbed.import_command",
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
    assert {"stackmodel.config", "stackmodel.checks", "loadgen.runner", "testbed.render"} <= set(
        MODULES
    )
    assert "stackmodel.config" in GRAPH["stackmodel.checks"][0]


STEP_RUNTIME = {"components.load_provider", "loadstep.runtime", "clusterread.read"}
"""Modules that import a step's runtime inside the functions that run it: the load step's
(grid runner, pod watch, report) and the cluster check's (the `kubernetes` client, through
kubeclient.client). ``pulumi preview``/``up`` import the program, and a module-level import
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
    assert "loadgen.runner" in GRAPH["loadstep.runtime"][0]


def test_the_import_graph_has_no_cycle() -> None:
    sorter = TopologicalSorter({name: deps for name, (deps, _) in GRAPH.items()})
    try:
        order = list(sorter.static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
    # The model comes before the checks, which come before the validation that runs them.
    assert order.index("stackmodel.config") < order.index("stackmodel.checks")
    assert order.index("stackmodel.checks") < order.index("stackmodel.validation")


def _layer(module: str) -> int:
    return LAYER_OF[module.split(".")[0]]


def test_every_package_is_in_a_layer() -> None:
    found = {p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests"}
    assert found - {"bench"} == set(PACKAGES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_layer_above_its_own(module: str) -> None:
    above = sorted(dep for dep in GRAPH[module][0] if _layer(dep) > _layer(module))
    assert not above, f"{module} (layer {_layer(module)}) imports a layer above it: {above}"


def test_a_layer_violation_would_be_found() -> None:
    """A reach upward (steptime -> the stack model's catalog) is a layer above steptime."""
    assert _layer("stackmodel.models") > _layer("steptime.roofline")


def _third_party(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if any(m == p or m.startswith(f"{p}.") for p in PURE))
)
def test_the_model_imports_no_pulumi_and_no_kubernetes_client(module: str) -> None:
    found = sorted(_third_party(MODULES[module]) & set(FORBIDDEN))
    assert not found, (
        f"{module} imports {found}: import it in components/, clusterread/ or incluster/"
    )


def test_the_purity_rule_sees_an_import_inside_a_function() -> None:
    assert "kubernetes" in _third_party(MODULES["clusterread.read"])


def test_a_cycle_would_be_found() -> None:
    """The cycle this test guards against (config -> checks -> config) is reported."""
    sorter = TopologicalSorter({"a.config": {"a.checks"}, "a.checks": {"a.config"}})
    with pytest.raises(CycleError):
        sorter.prepare()
