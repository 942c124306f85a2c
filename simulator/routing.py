"""The routing run: a stack's topology as a local Dynamo graph (the real frontend and KV
router, CPU-only mocker workers) that runs the load grid with :mod:`loadgen`; every request's
prefix-cache hit as Dynamo reports it is kept in ``<out>/<stack>/routing/``. Its timing is the
mockers', on this CPU: not used (:mod:`simulator.retime` times the same requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from loadgen.prompts import PromptCache
from loadgen.runner import GridRun, SideBySide, run_grid_async
from measurement.results import GridResult
from simulator.localgraph import (
    QUIET_LOG_LEVEL,
    LocalGraph,
    LocalGraphSpec,
    MockerGroup,
    ProcessWatch,
    start_together,
)
from simulator.model_dir import make_model_dir
from stackmodel.plan import StackPlan
from stackmodel.quantities import MOCKER_BLOCK_SIZE_TOKENS
from workload.config import LoadConfig

ROUTING_MAX_TOKENS = 4
"""Output tokens of each request in the routing run: routing and prefix-cache hits depend on
the prompts, not on how long the answers are; the timing model uses the stack's ``maxTokens``."""


ROUTING_SPEEDUP = 100.0
"""Mocker ``--speedup-ratio`` of the routing run (``testbed simulate --speedup``'s default): its
timing is not used (ai-dynamo 1.6.1 ``dynamo/mocker/args.py`` lines 259-264: "Speedup ratio
for mock execution"). Faster mockers leave the graph's and the load client's CPU to set the
pace, but they also change routing: with less time in the workers the KV router sees less
load and keeps more requests on the worker holding their prefix. 100 saves nearly all the wall
time 1000 would and keeps the cached ratios close to those at 10 (measured on the full seed
grid of both stacks, 2 shared cores: docs/simulation.md)."""


ROUTING_DIR = "routing"


ROUTING_LABEL = (
    "the routing run of testbed simulate: the real Dynamo frontend with CPU-only mocker "
    f"workers on this machine, {ROUTING_MAX_TOKENS} output tokens, the mocker sped up; its times "
    "are the mockers' wall clock on this CPU, not the stack's (those are in ../summary.json): "
    "only its routing and prefix-cache hits are used"
)
"""What the routing run's folder says it is (``GridResult.simulated``: its table, summary and
report are labelled with it)."""


def graph_spec(
    plan: StackPlan, *, speedup_ratio: float | None = None, routing_only: bool = False
) -> LocalGraphSpec:
    """The local Dynamo graph that stands in for a stack's deployment.

    Each worker group becomes a mocker group (``-`` in names becomes ``_``, as Dynamo component
    names require) with the stack's replicas and role; ``--kv-bytes-per-token`` from the model
    geometry; ``--num-gpu-blocks-override`` from the KV capacity sizing computes for one worker
    of the group, in the mocker's 64-token blocks
    (:meth:`~stackmodel.sizing.StackSizing.gpu_blocks`, the same number a mocker DGD and, as
    bytes, vLLM's ``--kv-cache-memory-bytes`` get); prefill groups get the link throughput to
    decode (decimal GB/s), which the mocker charges per request as if it had the link alone.
    ``routing_only`` (the routing run of ``testbed simulate``, whose timing is not used) drops
    that charge. ``speedup_ratio`` defaults to the stack's ``engine.speedupRatio``. A
    ``vllm-service`` stack has no Dynamo router: requests are spread round-robin, as a
    Kubernetes Service would.
    """
    cfg, sizing = plan.cfg, plan.sizing
    speedup = cfg.engine.speedup_ratio if speedup_ratio is None else speedup_ratio
    groups = []
    for group in cfg.topology.workers:
        link = None
        if group.role == "prefill":
            link = 0.0 if routing_only else sizing.link_gb_per_s(group.name)
        groups.append(
            MockerGroup(
                name=group.name.replace("-", "_"),
                role=group.role,
                replicas=group.replicas,
                kv_bytes_per_token=sizing.kv_bytes_per_token,
                kv_transfer_bandwidth_gb_per_s=link,
                num_gpu_blocks=sizing.gpu_blocks(group.name, MOCKER_BLOCK_SIZE_TOKENS),
                speedup_ratio=speedup,
            )
        )
    return LocalGraphSpec(model_name=cfg.model.name, router_mode=plan.router, groups=tuple(groups))


@dataclass(frozen=True)
class RoutingJob:
    """One stack's routing run: its plan, the graph that stands in for it (:func:`graph_spec`),
    its load (:func:`simulator.simulate.simulation_load`) and its folder (``<out>/<stack>``)."""

    plan: StackPlan
    spec: LocalGraphSpec
    load: LoadConfig
    stack_dir: Path


def routing_run(
    plan: StackPlan,
    spec: LocalGraphSpec,
    load: LoadConfig,
    stack_dir: Path,
    *,
    progress: bool,
    resume: bool = False,
) -> GridResult:
    """One stack's :func:`routing_runs` (the benches' single routing run)."""
    job = RoutingJob(plan, spec, load, stack_dir)
    return routing_runs([job], progress=progress, resume=resume)[0]


def routing_runs(
    jobs: Sequence[RoutingJob], *, progress: bool, resume: bool = False
) -> list[GridResult]:
    """Layer 1 of every job, side by side: the load grid (with :data:`ROUTING_MAX_TOKENS`
    output tokens) against the job's own real Dynamo graph; loadgen's result folder is
    ``<stack_dir>/routing`` (with the frontend's server-side metrics, and a graph process that
    ended during the grid as an incident, :class:`~simulator.localgraph.ProcessWatch`).

    Each graph has its own processes, port and folders; the graphs start together
    (:func:`~simulator.localgraph.start_together`, from this thread, so that their processes die
    with it), then the grids run in one event loop, sharing their prompts
    (:class:`loadgen.prompts.PromptCache`: the same load settings build the same prompts) and
    one progress bar. The graphs log warnings and errors only
    (:data:`~simulator.localgraph.QUIET_LOG_LEVEL`), and the load client's warnings stay in the
    routing folders (:func:`client_warnings_unprinted`). Two grids in one process share its
    garbage collector, which each run freezes and unfreezes (``loadgen.loops``): it guards
    the client's timing, which a routing run does not use. When a grid fails, the others are
    cancelled (each keeps the runs it finished, written as they finish) and the first error is
    raised; every process of every graph is stopped on return, on error and on Ctrl-C. A graph
    listens on another port each time: a folder's runs are told apart by the graph's spec
    (``local <spec>``), so ``resume`` keeps runs of the same graph.

    Raises:
        LocalGraphError: a graph did not start.
    """
    prompts = PromptCache(uses=len(jobs))
    with ExitStack() as graphs, Progress(disable=not progress, transient=True) as bar:
        model_dirs = [make_model_dir(job.stack_dir / "model") for job in jobs]
        started = [
            LocalGraph(
                job.spec,
                workdir=job.stack_dir / "graph",
                model_dir=model_dir,
                log_level=QUIET_LOG_LEVEL,
            )
            for job, model_dir in zip(jobs, model_dirs, strict=True)
        ]
        for graph in started:
            graphs.callback(graph.stop)
        start_together(started)
        grids = [
            run_grid_async(
                GridRun(
                    graph.url,
                    job.plan.cfg.model.name,
                    job.load.model_copy(
                        update={"max_tokens": ROUTING_MAX_TOKENS, "output_lengths": None}
                    ),
                    job.stack_dir / ROUTING_DIR,
                    tokenizer=str(model_dir),
                    observers=[graphs.enter_context(ProcessWatch(graph))],
                    resume=resume,
                    server_id=f"local {job.spec!r}",
                    side_by_side=SideBySide(
                        ROUTING_LABEL,
                        prompts,
                        bar,
                        job.stack_dir.name if len(jobs) > 1 else "",
                    ),
                )
            )
            for job, graph, model_dir in zip(jobs, started, model_dirs, strict=True)
        ]
        with client_warnings_unprinted():
            return asyncio.run(side_by_side(grids))


@contextlib.contextmanager
def client_warnings_unprinted() -> Iterator[None]:
    """For the block, the load client's logged warnings (``loadgen.runner``: a run that asks
    more of the client than one core can time honestly) are not printed: a routing run's
    timing is not used, and the mockers at :data:`ROUTING_SPEEDUP` answer faster than such a
    client times well. Each stays in its run's warnings in the routing folder."""
    logger = logging.getLogger("loadgen.runner")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


async def side_by_side(grids: Sequence[Coroutine[Any, Any, GridResult]]) -> list[GridResult]:
    """The results of ``grids`` run concurrently, in their order. When one raises, the others
    are cancelled and awaited before its error is raised; on cancellation (Ctrl-C in
    ``asyncio.run``) all are."""
    tasks = [asyncio.ensure_future(grid) for grid in grids]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
