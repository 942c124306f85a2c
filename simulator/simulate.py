"""Simulate a stack on this machine in two layers: the real Dynamo graph decides routing and
prefix-cache hits, a discrete-event model of the stack's shared hardware decides timing.

1. **Routing run** (real Dynamo): the stack's topology (:func:`stackmodel.topology.build_topology`)
   as a local graph of the Dynamo frontend (KV router) and CPU-only mocker workers, with each
   worker's KV capacity from sizing, runs the load grid with :mod:`loadgen`. Every request's
   ``cached_tokens`` (block-aligned, reported by the worker that streamed the answer: the
   aggregated worker the KV router chose, or the decode worker; :mod:`simulator.timing_model`
   says why and how the prefill worker's own hit is modelled) is kept in
   ``<out>/<stack>/routing/`` (loadgen's result folder). Its timing is the mocker's, on a CPU:
   not used. Requests there are short (:data:`ROUTING_MAX_TOKENS` output tokens) and the mocker
   is sped up, so the run takes seconds per grid point.
2. **Timing** (:mod:`simulator.timing_model`): the same requests, in the same order and
   closed loop (an open loop: at the routing run's due times), on the stack's workers sharing
   time-sliced GPUs, the KV link and host memory, with the constants of
   :mod:`simulator.calibration`. It produces loadgen request records, so
   the same statistics give the seed-style table, and the memory model's OOMKills become
   incidents (``incidents.json``, :mod:`measurement.incidents`).

The result folder ``<out>/<stack>/`` has loadgen's files (``summary.json``, ``result.json``,
``requests.parquet``, ``runs.csv``, ``table.txt``) plus ``incidents.json``.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configkeys.key_paths import Setting
from measurement.results import GridResult, PointSummary
from outputs.folder_reader import STACK_FILE
from outputs.folder_writer import (
    RESULT_FILE,
    write_text_atomic,
)
from simulator.calibration import CONSTANTS
from simulator.hardware import stack_constants
from simulator.localgraph import (
    LocalGraphSpec,
)
from simulator.retime import write_timed
from simulator.routing import ROUTING_SPEEDUP, RoutingJob, graph_spec, routing_runs
from simulator.seed import SEED_SAME_NODE
from simulator.stack_values import refuse_other_stack_values, stack_values
from simulator.timing_model import (
    TimingConstants,
)
from stackmodel.config import StackConfig
from stackmodel.crossover import CROSSOVER_FILE, crossover, crossover_json
from stackmodel.plan import StackPlan
from stackmodel.resources import group_kv_tokens, stack_file_text, stack_resources
from stackmodel.topology import build_topology
from workload.config import LoadConfig

REDUCED_GRID = {"prefix_kinds": [2, 24], "concurrency": [4], "repetitions": 1}
"""The default simulation grid of the seed's two stacks (:data:`REDUCED_GRID_STACKS`): the
seed's extremes of prefix kinds at its lower concurrency, one repetition. ``--full`` runs their
own grid (the seed's {2,7,12,24} x {4,8} x 3); every other stack runs its own ``load`` grid."""

REDUCED_GRID_STACKS = tuple(SEED_SAME_NODE)
"""The stacks simulated on :data:`REDUCED_GRID` unless told otherwise, by name: the seed's two
(the README's main job, kept to seconds)."""


REDUCED_REQUESTS_PER_RUN = 100
"""Requests per run on the reduced grid."""


def simulation_load(
    cfg: StackConfig,
    *,
    full: bool,
    grid: Mapping[str, Any] | None = None,
    settings: Sequence[Setting] = (),
) -> LoadConfig:
    """The stack's load config: its own grid with ``full``, else :data:`REDUCED_GRID` with
    :data:`REDUCED_REQUESTS_PER_RUN`; a ``load.<key>`` set by ``--set`` (``settings``) keeps the
    stack's value, and ``grid`` (LoadConfig field names, from the options) overrides all."""
    load = cfg.load.grid()
    update: dict[str, Any] = {}
    if not full:
        update = dict(
            REDUCED_GRID, requests_per_run=min(load.requests_per_run, REDUCED_REQUESTS_PER_RUN)
        )
    for name in set_load_fields(settings):
        update.pop(name, None)
    update |= dict(grid or {})
    return LoadConfig.model_validate(load.model_dump() | update)


def stack_load(
    stack: str,
    cfg: StackConfig,
    *,
    full: bool,
    grid: Mapping[str, Any] | None = None,
    settings: Sequence[Setting] = (),
) -> LoadConfig:
    """The grid ``testbed simulate`` runs for ``stack``: :func:`simulation_load` of its own
    ``load`` section, the :data:`REDUCED_GRID` for the stacks of :data:`REDUCED_GRID_STACKS`
    (by name) unless ``full``."""
    own = full or stack not in REDUCED_GRID_STACKS
    return simulation_load(cfg, full=own, grid=grid, settings=settings)


def grid_length_s(points: Sequence[PointSummary], load: LoadConfig) -> float | None:
    """How long ``load``'s grid serves on the cluster by the simulation's rates (seconds):
    each of its runs, its measured requests and warm-ups at the simulated requests/s of its
    grid point (of the nearest simulated point when that one was not simulated: the same
    concurrency first, then the nearest prefix kinds), at most the offered rate of an open
    loop (Poisson arrivals: a run lasts at least its requests / the rate). None without a
    simulated point with a rate. Not in it: the readiness wait, pauses between runs, and what
    deploying takes.
    """
    rated = [p for p in points if p.requests_per_s > 0]
    if not rated:
        return None
    total = 0.0
    for kinds in load.prefix_kinds:
        for concurrency in load.concurrency:
            point = min(
                rated,
                key=lambda p: (p.concurrency != concurrency, abs(p.prefix_kinds - kinds)),
            )
            requests = load.requests_per_run + load.warmup_count(concurrency)
            rate = point.requests_per_s
            if load.request_rate is not None and load.arrival == "poisson":
                rate = min(rate, load.request_rate)  # arrivals pace an open loop
            total += load.repetitions * requests / rate
    return total


def set_load_fields(settings: Sequence[Setting]) -> list[str]:
    """The LoadConfig fields (snake_case) that ``load.<key>`` settings set."""
    by_alias = {f.alias or n: n for n, f in LoadConfig.model_fields.items()}
    by_alias |= {n: n for n in LoadConfig.model_fields}
    return [
        by_alias[str(s.path[1])]
        for s in settings
        if len(s.path) > 1 and s.path[0] == "load" and str(s.path[1]) in by_alias
    ]


@dataclass(frozen=True)
class Simulation:
    """One simulated stack: its name, routing graph, timed result and result folder."""

    stack: str
    spec: LocalGraphSpec
    result: GridResult
    out_dir: Path


def simulate_stacks(
    stacks: Mapping[str, StackPlan],
    out_dir: Path,
    *,
    full: bool = False,
    grid: Mapping[str, Any] | None = None,
    settings: Sequence[Setting] | Mapping[str, Sequence[Setting]] = (),
    speedup_ratio: float = ROUTING_SPEEDUP,
    constants: TimingConstants = CONSTANTS,
    progress: bool = True,
    resume: bool = False,
) -> list[Simulation]:
    """Routing runs of every stack side by side (real Dynamo graphs), then the timing model of
    each; returns the timed results in the order of ``stacks`` (stack name -> its plan, as
    :func:`stackmodel.stacks.load_stack` gives it with ``settings``; a mapping gives each stack
    its own, by name).

    The grid each stack runs: :func:`simulation_load` of its ``load`` (its own grid; the
    stacks of :data:`REDUCED_GRID_STACKS` :data:`REDUCED_GRID` unless ``full``), ``grid``
    overriding it by :class:`~workload.config.LoadConfig` field name (``{"prefix_kinds": [2],
    "requests_per_run": 20}``). ``speedup_ratio``: the routing run's mocker
    ``--speedup-ratio``; ``constants``: the timing model's; ``progress``: a progress bar on
    the terminal.

    Writes, per stack, ``out_dir/<stack>/`` (summary.json, result.json, runs.csv,
    requests.parquet, table.txt, incidents.json, and ``stack.json``: the resources the stack
    would run on, for ``testbed compare``; ``crossover.json``: where disaggregation pays for the
    config simulated, :data:`stackmodel.crossover.CROSSOVER_FILE`), the routing run's folder
    ``out_dir/<stack>/routing/`` (one folder per grid point and repetition in ``runs/``), the
    model directory and the graph's logs (``out_dir/<stack>/graph/logs``). ``stack.json`` is
    written first, with the stack values the results depend on (:func:`stack_values`). With
    ``resume``, each routing run keeps its complete runs (same stack values,
    :func:`refuse_other_stack_values`; same load settings, checked by loadgen) and measures only
    the others; runs at grid points outside this grid stay in ``routing/runs/``. Every process
    of every graph is stopped on return, on error and on Ctrl-C; a routing run's finished runs
    stay in its folder when another's fails. The caller holds the folders' locks
    (:func:`outputs.folder_lock.folder_lock` on each ``out_dir/<stack>``) and refuses a folder
    that holds complete runs without ``resume`` (as ``testbed simulate`` does): without
    ``resume`` the folders are written afresh.

    Raises:
        LocalGraphError: a graph did not start (the message has the log tails).
        ResumeError: ``resume`` in a folder simulated with other stack values or load
            settings.
    """
    jobs = []
    each = {
        stack: settings.get(stack, ()) if isinstance(settings, Mapping) else settings
        for stack in stacks
    }
    for stack, plan in stacks.items():
        spec = graph_spec(plan, speedup_ratio=speedup_ratio, routing_only=True)
        load = stack_load(stack, plan.cfg, full=full, grid=grid, settings=each[stack])
        jobs.append(RoutingJob(plan, spec, load, out_dir / stack))
    for job in jobs:
        values = stack_values(job.plan, each[job.stack_dir.name])
        if resume:
            refuse_other_stack_values(job.stack_dir, values)
        job.stack_dir.mkdir(parents=True, exist_ok=True)
        topology = build_topology(job.plan)
        resources = stack_resources(job.plan.cfg, topology, group_kv_tokens(job.plan))
        labels = {**job.plan.run_labels, "servedBy": "timing model (testbed simulate)"}
        text = stack_file_text(job.stack_dir.name, resources, values, labels)
        write_text_atomic(job.stack_dir / STACK_FILE, text)
        write_text_atomic(job.stack_dir / CROSSOVER_FILE, crossover_json(crossover(job.plan)))
    routings = routing_runs(jobs, progress=progress, resume=resume)
    timed = timed_side_by_side(jobs, routings, constants)
    return [
        Simulation(stack=job.stack_dir.name, spec=job.spec, result=result, out_dir=job.stack_dir)
        for job, result in zip(jobs, timed, strict=True)
    ]


def _write_timed_in_worker(*args: Any) -> None:
    """:func:`write_timed` in a worker of :func:`timed_side_by_side`, deaf to Ctrl-C (the
    terminal sends SIGINT to the whole foreground group): the command that started it
    terminates it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    write_timed(*args)


class TimingError(RuntimeError):
    """The timing model of a stack failed in its worker process (its traceback is on stderr)."""


def timed_side_by_side(
    jobs: Sequence[RoutingJob],
    routings: Sequence[GridResult],
    constants: TimingConstants = CONSTANTS,
) -> list[GridResult]:
    """:func:`write_timed` of every job at once (with :func:`stack_constants` of its stack):
    the last in this process, each other in a worker process of its own (``spawn``: a clean
    interpreter, which imports this module in ~2.5 s of CPU), whose result is read back from
    the folder it wrote (``result.json``, the same ``GridResult``). The timing model is pure
    Python, one core per stack (~9 s of wall time for a seed stack's full grid,
    docs/simulation.md). A worker still running when this returns or raises (an error in this
    process, Ctrl-C) is terminated.

    Raises:
        TimingError: a worker process failed (its exit code; its traceback was printed).
    """
    context = multiprocessing.get_context("spawn")
    workers = []
    try:
        for job, routing in zip(jobs[:-1], routings[:-1], strict=True):
            worker = context.Process(
                target=_write_timed_in_worker,
                args=(
                    job.plan,
                    job.load,
                    routing,
                    job.stack_dir,
                    stack_constants(job.plan, constants),
                ),
                daemon=True,
            )
            worker.start()
            workers.append((job, worker))
        last = write_timed(
            jobs[-1].plan,
            jobs[-1].load,
            routings[-1],
            jobs[-1].stack_dir,
            stack_constants(jobs[-1].plan, constants),
        )
        results = []
        for job, worker in workers:
            worker.join()
            if worker.exitcode != 0:
                raise TimingError(
                    f"{job.stack_dir.name}: the timing model's process exited with "
                    f"{worker.exitcode} (its traceback is above); its routing run is complete "
                    "in its folder: the same command with --resume times it again"
                )
            text = (job.stack_dir / RESULT_FILE).read_text()
            results.append(GridResult.model_validate_json(text))
        return [*results, last]
    finally:
        for _, worker in workers:
            if worker.is_alive():
                worker.terminate()
                worker.join()
