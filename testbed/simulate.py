"""Simulate a stack on this machine: the real Dynamo frontend, CPU-only mocker workers, the grid.

The stack's :class:`~components.config.StackConfig` gives the same topology the Pulumi program
deploys (:func:`components.topology.build_topology`): router mode, worker roles and replicas.
Sizing (:func:`components.stack_sizing.stack_sizing`) gives each mocker its KV bytes per token,
its KV capacity (the GPU memory left for KV cache on the worker's node class) and, on prefill
workers, the throughput of the link to the decode workers. Then the stack's load grid runs with
:mod:`loadgen` and the seed-style table is printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.config import StackConfig, project_values
from components.sizing import MOCKER_BLOCK_SIZE_TOKENS
from components.stack_resources import STACK_FILE, stack_file_text, stack_resources
from components.stack_sizing import stack_sizing
from components.topology import build_topology
from components.validation import parse_stack_config
from loadgen.config import LoadConfig
from loadgen.results import GridResult
from loadgen.runner import run_grid
from testbed.localgraph import LocalGraph, LocalGraphSpec, MockerGroup, ProcessWatch
from testbed.model_dir import make_model_dir
from testbed.render import stack_config

REDUCED_GRID = {"prefix_kinds": [2, 24], "concurrency": [4], "repetitions": 1}
"""The default simulation grid: the seed's extremes of prefix kinds at its lower concurrency,
one repetition. ``--full`` runs the stack's own grid (the seed's {2,7,12,24} x {4,8} x 3)."""

REDUCED_REQUESTS_PER_RUN = 40
"""Requests per run on the reduced grid: enough for a stable p50 in a few seconds."""


def load_stack(stack: str) -> StackConfig:
    """A stack's validated config, read as the Pulumi CLI would pass it.

    Raises:
        FileNotFoundError: no ``stacks/Pulumi.<stack>.yaml``.
        StackConfigError: invalid config.
    """
    config, _ = stack_config(stack)
    return parse_stack_config(stack, project_values(config))


def graph_spec(cfg: StackConfig, *, speedup_ratio: float | None = None) -> LocalGraphSpec:
    """The local graph that stands in for a stack's deployment.

    Each worker group becomes a mocker group (``-`` in names becomes ``_``, as Dynamo component
    names require) with the stack's replicas and role; ``--kv-bytes-per-token`` from the model
    geometry; ``--num-gpu-blocks-override`` from the KV capacity sizing computes for one worker
    of the group, in the mocker's 64-token blocks (:meth:`StackSizing.gpu_blocks`, the same
    number a mocker DGD and, as bytes, vLLM's ``--kv-cache-memory-bytes`` get); prefill groups
    get the link throughput to decode (decimal GB/s). A ``vllm-service`` stack has no Dynamo
    router: requests are spread round-robin, as a Kubernetes Service would.
    """
    topology = build_topology(cfg)
    sizing = stack_sizing(cfg)
    speedup = cfg.engine.speedup_ratio if speedup_ratio is None else speedup_ratio
    groups = []
    for plan in topology.components:
        if plan.role == "frontend":
            continue
        groups.append(
            MockerGroup(
                name=plan.name.replace("-", "_"),
                role=plan.role,
                replicas=plan.replicas,
                kv_bytes_per_token=sizing.kv_bytes_per_token,
                kv_transfer_bandwidth_gb_per_s=(
                    sizing.link_gb_per_s(plan.name) if plan.role == "prefill" else None
                ),
                num_gpu_blocks=sizing.gpu_blocks(plan.name, MOCKER_BLOCK_SIZE_TOKENS),
                speedup_ratio=speedup,
            )
        )
    router = cfg.topology.router_mode if topology.kind == "dynamo" else "round-robin"
    return LocalGraphSpec(model_name=cfg.model.name, router_mode=router, groups=tuple(groups))


def simulation_load(cfg: StackConfig, *, full: bool) -> LoadConfig:
    """The stack's load config, reduced to :data:`REDUCED_GRID` unless ``full``."""
    if full:
        return cfg.load
    requests = min(cfg.load.requests_per_run, REDUCED_REQUESTS_PER_RUN)
    update = dict(REDUCED_GRID, requests_per_run=requests)
    return cfg.load.model_copy(update=update)


@dataclass(frozen=True)
class Simulation:
    """One simulated stack: its name, local graph, load result and result folder."""

    stack: str
    spec: LocalGraphSpec
    result: GridResult
    out_dir: Path


def simulate_stack(
    stack: str,
    out_dir: Path,
    *,
    full: bool = False,
    speedup_ratio: float | None = None,
    progress: bool = True,
) -> Simulation:
    """Start the stack's local graph, run its grid, stop every process, return the result.

    Writes ``out_dir/<stack>/`` (loadgen's summary.json, requests.parquet, ..., and
    ``stack.json``: the resources the stack would run on, for ``testbed compare``), the model
    directory and the graph's logs (``out_dir/<stack>/graph/logs``). A graph process that ends
    during the grid is an incident (:class:`~testbed.localgraph.ProcessWatch`). Every process
    is stopped on return, on error and on Ctrl-C.

    Raises:
        FileNotFoundError, StackConfigError: unknown stack or invalid config.
        LocalGraphError: the graph did not start (the message has the log tails).
    """
    cfg = load_stack(stack)
    spec = graph_spec(cfg, speedup_ratio=speedup_ratio)
    stack_dir = out_dir / stack
    model_dir = make_model_dir(stack_dir / "model")
    with (
        LocalGraph(spec, workdir=stack_dir / "graph", model_dir=model_dir) as graph,
        ProcessWatch(graph) as processes,
    ):
        result = run_grid(
            graph.url,
            cfg.model.name,
            simulation_load(cfg, full=full),
            stack_dir,
            tokenizer=str(model_dir),
            progress=progress,
            observers=[processes],
        )
    resources = stack_resources(cfg, build_topology(cfg))
    (stack_dir / STACK_FILE).write_text(stack_file_text(stack, resources))
    return Simulation(stack=stack, spec=spec, result=result, out_dir=stack_dir)
