"""Simulate a stack on this machine in two layers: the real Dynamo graph decides routing and
prefix-cache hits, a discrete-event model of the stack's shared hardware decides timing.

1. **Routing run** (real Dynamo): the stack's topology (:func:`stackmodel.topology.build_topology`)
   as a local graph of the Dynamo frontend (KV router) and CPU-only mocker workers, with each
   worker's KV capacity from sizing, runs the load grid with :mod:`loadgen`. Every request's
   ``cached_tokens`` (block-aligned, reported by the worker that streamed the answer: the
   aggregated worker the KV router chose, or the decode worker; :mod:`testbed.timing_model`
   says why and how the prefill worker's own hit is modelled) is kept in
   ``<out>/<stack>/routing/`` (loadgen's result folder). Its timing is the mocker's, on a CPU:
   not used. Requests there are short (:data:`ROUTING_MAX_TOKENS` output tokens) and the mocker
   is sped up, so the run takes seconds per grid point.
2. **Timing** (:mod:`testbed.timing_model`): the same requests, in the same order and
   closed loop, on the stack's workers sharing time-sliced GPUs, the KV link and host memory,
   with the constants of :mod:`testbed.calibration`. It produces loadgen request records, so
   the same statistics give the seed-style table, and the memory model's OOMKills become
   incidents (``incidents.json``, :mod:`loadgen.incidents`).

The result folder ``<out>/<stack>/`` has loadgen's files (``summary.json``, ``result.json``,
``requests.parquet``, ``runs.csv``, ``table.txt``) plus ``incidents.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import multiprocessing
import signal
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
from rich.progress import Progress

from kvpath.copies import NOTES_HOST_COPIES, threads_from_env
from kvpath.memory import HOST_BASE_BYTES
from loadgen.config import LoadConfig
from loadgen.incidents import Incident
from loadgen.key_paths import PathPart, Setting, show_path
from loadgen.output import (
    REQUESTS_FILE,
    RESULT_FILE,
    MeasuredRun,
    PromptSizing,
    ResultsFolder,
    ResumeError,
    complete_runs,
    grid_settings,
    records_frame,
    write_text_atomic,
)
from loadgen.prompts import PromptCache
from loadgen.request import ErrorKind, RequestRecord
from loadgen.results import GridResult, PointSummary
from loadgen.results_folder import STACK_FILE
from loadgen.runner import _first_errors, grid_keys, grid_result, run_grid_async
from loadgen.stats import summarize_run
from stackmodel.config import StackConfig
from stackmodel.crossover import CROSSOVER_FILE, crossover, crossover_json
from stackmodel.quantities import MOCKER_BLOCK_SIZE_TOKENS, parse_quantity
from stackmodel.resources import stack_file_text, stack_resources
from stackmodel.sizing import (
    calibration,
    engine_label,
    engine_step,
    gpu_note,
    link_profile,
    replica_name,
    stack_sizing,
)
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology
from steptime.calibration_profile import mismatch_note
from steptime.fit import SEED_FIT, extrapolation_note
from steptime.roofline import EngineFit
from testbed.calibration import CONSTANTS
from testbed.localgraph import (
    QUIET_LOG_LEVEL,
    LocalGraph,
    LocalGraphSpec,
    MockerGroup,
    ProcessWatch,
    start_together,
)
from testbed.model_dir import make_model_dir
from testbed.timing_model import (
    OOM_EXIT_CODE,
    Kill,
    RunTiming,
    RunTopology,
    SimRequest,
    TimingConstants,
    WorkerSpec,
    simulate_run,
)

REDUCED_GRID = {"prefix_kinds": [2, 24], "concurrency": [4], "repetitions": 1}
"""The default simulation grid: the seed's extremes of prefix kinds at its lower concurrency,
one repetition. ``--full`` runs the stack's own grid (the seed's {2,7,12,24} x {4,8} x 3)."""

REDUCED_REQUESTS_PER_RUN = 100
"""Requests per run on the reduced grid."""

ROUTING_MAX_TOKENS = 4
"""Output tokens of each request in the routing run: routing and prefix-cache hits depend on
the prompts, not on how long the answers are; the timing model uses the stack's ``maxTokens``."""

ROUTING_SPEEDUP = 100.0
"""Mocker ``--speedup-ratio`` of the routing run (``testbed simulate --speedup``'s default): its
timing is not used. ai-dynamo 1.6.1 documents it as the "Speedup ratio for mock execution"
(``dynamo/mocker/args.py`` lines 259-264; the scheduler itself is compiled into
``_core.abi3.so``). Faster mockers leave the graph's and the load client's CPU to set the
pace, but they also change routing: with less time in the workers the KV router sees less
load and keeps more requests on the worker holding their prefix. Measured on the full seed
grid of both stacks side by side: 117 s wall at 10, 97 s at 100, 95 s at 1000; kv-routing's
cached ratio at 7 and 12 kinds, concurrency 8, 0.752 and 0.658 at 10 (0.760-0.768 and
0.619-0.681 one stack after the other), 0.768 and 0.701 at 100, 0.795-0.808 and 0.706-0.739
at 1000. 100 takes nearly all of the time saved and keeps the hits within the runs' spread
at 10 (docs/simulation.md)."""

ROUTING_DIR = "routing"
ROUTING_LABEL = (
    "the routing run of testbed simulate: the real Dynamo frontend with CPU-only mocker "
    f"workers on this machine, {ROUTING_MAX_TOKENS} output tokens, the mocker sped up; its times "
    "are the mockers' wall clock on this CPU, not the stack's (those are in ../summary.json): "
    "only its routing and prefix-cache hits are used"
)
"""What the routing run's folder says it is (``GridResult.simulated``: its table, summary and
report are labelled with it)."""

KV_SIZE_ARGS = ("--num-gpu-blocks-override",)
"""vLLM arguments in ``extraArgs`` that set a worker's KV cache size beside the one the program
passes, ``--kv-cache-memory-bytes`` from sizing (:func:`stackmodel.topology.worker_args`, so
vLLM skips its memory profile). An ``extraArgs`` copy of ``--kv-cache-memory-bytes`` itself is
refused before the simulation runs (``stackmodel.checks``: a flag the program writes from a
key)."""


def graph_spec(
    cfg: StackConfig, *, speedup_ratio: float | None = None, routing_only: bool = False
) -> LocalGraphSpec:
    """The local Dynamo graph that stands in for a stack's deployment.

    Each worker group becomes a mocker group (``-`` in names becomes ``_``, as Dynamo component
    names require) with the stack's replicas and role; ``--kv-bytes-per-token`` from the model
    geometry; ``--num-gpu-blocks-override`` from the KV capacity sizing computes for one worker
    of the group, in the mocker's 64-token blocks (:meth:`StackSizing.gpu_blocks`, the same
    number a mocker DGD and, as bytes, vLLM's ``--kv-cache-memory-bytes`` get); prefill groups
    get the link throughput to decode (decimal GB/s), which the mocker charges per request as
    if it had the link alone. ``routing_only`` (the routing run of ``testbed simulate``, whose
    timing is not used) drops that charge. ``speedup_ratio`` defaults to the stack's
    ``engine.speedupRatio``. A ``vllm-service`` stack has no Dynamo router: requests are spread
    round-robin, as a Kubernetes Service would.
    """
    topology = build_topology(cfg)
    sizing = stack_sizing(cfg)
    speedup = cfg.engine.speedup_ratio if speedup_ratio is None else speedup_ratio
    groups = []
    for plan in topology.components:
        if plan.role == "frontend":
            continue
        link = None
        if plan.role == "prefill":
            link = 0.0 if routing_only else sizing.link_gb_per_s(plan.name)
        groups.append(
            MockerGroup(
                name=plan.name.replace("-", "_"),
                role=plan.role,
                replicas=plan.replicas,
                kv_bytes_per_token=sizing.kv_bytes_per_token,
                kv_transfer_bandwidth_gb_per_s=link,
                num_gpu_blocks=sizing.gpu_blocks(plan.name, MOCKER_BLOCK_SIZE_TOKENS),
                speedup_ratio=speedup,
            )
        )
    router = cfg.topology.router_mode if topology.kind == "dynamo" else "round-robin"
    return LocalGraphSpec(model_name=cfg.model.name, router_mode=router, groups=tuple(groups))


def run_topology(
    cfg: StackConfig, fit: EngineFit = SEED_FIT, host_base_bytes: int = HOST_BASE_BYTES
) -> RunTopology:
    """The stack's workers on their GPUs and hosts, its KV links and router, for the timing
    model.

    GPUs: each node class has ``nodes x gpusPerNode`` GPUs; its workers fill them in config
    order, ``timeSlicing.replicasPerGpu`` per GPU (one without time-slicing); a
    tensor-parallel worker takes ``tensorParallelSize`` GPUs of one node, named by its first
    (its step times already count all of them); a GPU's host is its node. Each worker's step
    times are :func:`stackmodel.sizing.engine_step` of its group with ``fit`` (the same model
    sizing's verdict reads). Workers with
    ``kvTransfer.bufferDevice: cpu`` get their ``memoryLimit``, their host mirror
    (:meth:`stackmodel.sizing.StackSizing.host_mirror_bytes`) and their torch
    threads (``OMP_NUM_THREADS``, else vLLM's one). Links: ``links.sameNode`` and
    ``links.crossNode``; copy rates: those a link profile carries from the probe (same node
    first), else the notes' (:data:`kvpath.copies.NOTES_HOST_COPIES`). A worker's host memory
    without its mirror is ``host_base_bytes``. Each worker publishes KV events as its group's
    ``kvEvents`` says; only a ``dynamo`` topology has a frontend (and its fixed cost).
    """
    sizing = stack_sizing(cfg)
    topology = build_topology(cfg)
    workers = []
    slot = dict.fromkeys(cfg.node_classes, 0)
    for group in cfg.topology.workers:
        node_class = cfg.node_classes[group.node_class]
        per_gpu = node_class.time_slicing.replicas_per_gpu if node_class.time_slicing else 1
        gpus = node_class.nodes * node_class.gpus_per_node
        host_buffer = group.kv_transfer is not None and group.kv_transfer.buffer_device == "cpu"
        step = engine_step(cfg, group.name, fit)
        mirror = sizing.host_mirror_bytes(group.name)
        tp = group.tensor_parallel_size
        for i in range(group.replicas):
            if tp > 1 and slot[group.node_class] % node_class.gpus_per_node + tp > (
                node_class.gpus_per_node
            ):  # a worker's GPUs are on one node: start it on the next
                slot[group.node_class] += -slot[group.node_class] % node_class.gpus_per_node
            gpu = (slot[group.node_class] // per_gpu) % gpus
            slot[group.node_class] += tp
            workers.append(
                WorkerSpec(
                    name=replica_name(group.name, i),
                    group=group.name,
                    role=group.role,
                    gpu=f"{group.node_class}/{gpu}",
                    step=step,
                    kv_capacity_tokens=sizing.kv_capacity_tokens(group.name),
                    memory_limit=parse_quantity(group.memory_limit) if host_buffer else None,
                    mirror_bytes=mirror if host_buffer else 0,
                    host=f"{group.node_class}/node-{gpu // node_class.gpus_per_node}",
                    threads=threads_from_env(dict(group.env)),
                    kv_events=group.kv_events,
                )
            )
    disaggregated = any(w.role == "prefill" for w in cfg.topology.workers)
    same = link_profile(cfg.links.same_node) if disaggregated else None
    cross = link_profile(cfg.links.cross_node) if disaggregated else None
    probed = [p.host_copies for p in (same, cross) if p is not None and p.host_copies]
    router = cfg.topology.router_mode if topology.kind == "dynamo" else "round-robin"
    return RunTopology(
        workers=tuple(workers),
        same_node_link=same,
        cross_node_link=cross,
        copies=probed[0] if probed else NOTES_HOST_COPIES,
        host_base_bytes=host_base_bytes,
        kv_bytes_per_token=sizing.kv_bytes_per_token,
        router=router,
        frontend=topology.kind == "dynamo",
    )


def provenance(cfg: StackConfig, fit: EngineFit = SEED_FIT) -> tuple[str, list[str]]:
    """What a simulated result says it is (``GridResult.simulated``: tables, ``summary.json``,
    the HTML report), and the warnings it carries: each node class that names no GPU (which
    default it got), each worker group outside the seed fit (model or GPU other than the
    fit's, :func:`steptime.fit.extrapolation_note`), and each tensor-parallel group (its
    all-reduce constants are assumptions)."""
    groups = []
    warnings = []
    for group in cfg.topology.workers:
        step = engine_step(cfg, group.name, fit)
        default = " (default)" if cfg.node_classes[group.node_class].gpu is None else ""
        tp = group.tensor_parallel_size
        gpus = f"{tp} x {step.gpu.name}" if tp > 1 else step.gpu.name
        groups.append(f"{group.name} on {gpus}{default}, {step.fit.label}")
        profile = calibration(cfg, group.node_class)
        note = (
            extrapolation_note(cfg.model.name, step.gpu.name, step.fit)
            if profile is None
            else mismatch_note(
                profile, gpu=step.gpu.name, model=cfg.model.name, engine=engine_label(cfg)
            )
        )
        if note is not None:
            warnings.append(f"{group.name}: {note}")
        if tp > 1:
            warnings.append(
                f"{group.name}: tensor-parallel over {tp} GPUs: its all-reduces' latency and "
                "bandwidth efficiency are assumptions (steptime.tensor_parallel), not fitted to "
                "a measured tensor-parallel run"
            )
    kv_routed = cfg.topology.kind == "dynamo" and cfg.topology.router_mode == "kv"
    for group in cfg.topology.workers:
        args = (*cfg.engine.extra_args, *group.extra_args)
        given = [a for a in args if a.split("=", 1)[0] in KV_SIZE_ARGS]
        if given and cfg.engine.kind == "vllm":
            warnings.append(
                f"{group.name}: extraArgs set {', '.join(given)}, which overrides the KV cache "
                f"the program sizes; the simulation keeps sizing's "
                f"{stack_sizing(cfg).kv_capacity_tokens(group.name):,} tokens per worker"
            )
        if kv_routed and not group.kv_events and group.role == "aggregated":
            warnings.append(
                f"{group.name}: kvEvents is false, but the routing run's mockers publish KV "
                "events (dynamo.mocker always does for a worker that is not decode): its "
                "prefix-cache hits are a KV-aware router's, not a prefix-blind one's"
            )
    for node_class in dict.fromkeys(w.node_class for w in cfg.topology.workers):
        note = gpu_note(cfg, node_class)
        if note is not None:
            warnings.append(note)
    release = release_note(cfg)
    if release is not None:
        warnings.append(release)
    text = (
        "testbed simulate: routing and prefix-cache hits from a real Dynamo frontend with "
        f"mocker workers; engine steps of {cfg.model.name} ({'; '.join(groups)}): datasheet "
        "roofline x efficiencies (steptime); KV path and host memory: testbed.timing_model"
    )
    return text, warnings


def release_note(cfg: StackConfig) -> str | None:
    """A warning when the stack's Dynamo release is of another minor line than the ``ai-dynamo``
    package the routing run starts (this project's lock, ``sim`` group): its frontend and
    mockers are that package's, whatever ``engine.dynamoVersion`` says; None on the same line
    or without the package."""
    from importlib import metadata

    try:
        installed = metadata.version("ai-dynamo")
    except metadata.PackageNotFoundError:
        return None
    release = cfg.engine.runtime_version or cfg.engine.dynamo_version
    if installed.split(".")[:2] == release.split(".")[:2]:
        return None
    return (
        f"engine.dynamoVersion {release}: the routing run uses the installed ai-dynamo "
        f"{installed} frontend and mockers, not Dynamo {release}'s; the timing model and the "
        "checks follow the stack's release"
    )


def stack_constants(cfg: StackConfig, constants: TimingConstants = CONSTANTS) -> TimingConstants:
    """``constants`` with the frontend's fixed cost of the first calibration profile (in worker
    order, :func:`stackmodel.sizing.calibration`) that measured one."""
    for group in cfg.topology.workers:
        profile = calibration(cfg, group.node_class)
        if profile is not None and profile.request_overhead_s is not None:
            return dataclasses.replace(constants, request_overhead_s=profile.request_overhead_s)
    return constants


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


def grid_length_s(points: Sequence[PointSummary], load: LoadConfig) -> float | None:
    """How long ``load``'s grid serves on the cluster by the simulation's rates (seconds):
    each of its runs, its measured requests and warm-ups at the simulated requests/s of its
    grid point (of the nearest simulated point when that one was not simulated: the same
    concurrency first, then the nearest prefix kinds). None without a simulated point with a
    rate. Not in it: the readiness wait, pauses between runs, and what deploying takes.
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
            total += load.repetitions * requests / point.requests_per_s
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


def sim_requests(frame: pd.DataFrame, load: LoadConfig) -> list[SimRequest]:
    """One run's rows of a routing run's ``requests.parquet`` as timing-model requests: its
    prompt tokens and cached tokens as the real Dynamo run reported them (disaggregated: the
    decode worker's hit), the stack's
    ``maxTokens`` as output (the mocker never stops early). A request that failed in the
    routing run (rare) keeps the configured prompt length and no prefix-cache hit."""
    out = []
    for row in frame.sort_values("index").itertuples():
        prompt = row.prompt_tokens if pd.notna(row.prompt_tokens) else load.prompt_tokens
        cached = row.cached_tokens if pd.notna(row.cached_tokens) else 0
        out.append(
            SimRequest(
                index=int(row.index),
                prefix_id=int(row.prefix_id),
                prefix_tokens=load.prefix_tokens,
                prompt_tokens=int(prompt),
                cached_tokens=int(cached),
                output_tokens=load.max_tokens,
            )
        )
    return out


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def timing_records(
    timing: RunTiming, requests: Sequence[SimRequest], offset_s: float
) -> list[RequestRecord]:
    """loadgen :class:`RequestRecord`\\ s of a simulated run, its clock starting at ``offset_s``
    (seconds since the grid started; the records' "monotonic" ns count from the grid start).
    A record's cached tokens are those a real deployment's client would be told
    (``Outcome.cached_tokens``: disaggregated, the prefill worker's modelled hit, not the routing
    run's decode-side figure)."""
    by_index = {r.index: r for r in requests}
    records = []
    for o in timing.outcomes:
        spec = by_index[o.index]
        sent = _ns(offset_s + o.sent_s)
        record = RequestRecord(index=o.index, prefix_id=spec.prefix_id, intended_ns=sent)
        record.sent_ns = sent
        if o.error is None:
            tokens = [_ns(offset_s + t) for t in o.token_s]
            record.status = 200
            record.first_byte_ns = record.first_chunk_ns = record.first_token_ns = tokens[0]
            record.token_ns = tokens
            record.chunks = len(tokens) + 1
            record.end_ns = record.last_token_ns = tokens[-1]
            record.finish_reason = "length"
            record.prompt_tokens = spec.prompt_tokens
            record.completion_tokens = len(tokens)
            record.cached_tokens = o.cached_tokens
        else:
            record.status = 503 if o.error_kind == ErrorKind.HTTP_STATUS else 200
            record.error_kind = ErrorKind(o.error_kind or ErrorKind.IN_BAND)
            record.error = o.error
            record.error_ns = record.end_ns = _ns(offset_s + (o.error_s or o.sent_s))
        records.append(record)
    return records


def _incident(kill: Kill, run_start: datetime) -> Incident:
    return Incident(
        source="simulation",
        component=kill.group,
        instance=kill.worker,
        kind="terminated",
        reason="OOMKilled",
        exit_code=OOM_EXIT_CODE,
        at=run_start + timedelta(seconds=kill.at_s),
        memory_bytes=kill.memory_bytes,
        message=(
            f"host memory {kill.memory_bytes / 2**20:,.0f} MiB > limit "
            f"{kill.limit_bytes / 2**20:,.0f} MiB, {kill.at_s:.1f} s into the run"
        ),
    )


def retime_grid(
    cfg: StackConfig,
    load: LoadConfig,
    routing: GridResult,
    routing_frame: pd.DataFrame,
    constants: TimingConstants = CONSTANTS,
    fit: EngineFit = SEED_FIT,
    host_base_bytes: int = HOST_BASE_BYTES,
) -> tuple[GridResult, list[MeasuredRun]]:
    """The grid of a routing run, timed by the timing model: per run, the same requests on the
    stack's shared hardware with engine steps of ``fit``; runs follow each other on one
    simulated clock from the routing run's start. Returns the result (OOMKills as incidents,
    placed in their runs) and the runs as loadgen keeps them. ``host_base_bytes``: see
    :func:`run_topology`."""
    topology = run_topology(cfg, fit, host_base_bytes)
    runs: list[MeasuredRun] = []
    incidents: list[Incident] = []
    started_at = routing.started_at
    clock_s = 0.0
    keys = ["prefix_kinds", "concurrency", "repetition"]
    groups = {k: g for k, g in routing_frame.groupby(keys)}
    for key in grid_keys(load):
        kinds, conc, rep = key
        requests = sim_requests(groups[key], load)
        timing = simulate_run(topology, constants, requests, conc)
        records = timing_records(timing, requests, clock_s)
        run_start = started_at + timedelta(seconds=clock_s)
        summary = summarize_run(records, prefix_kinds=kinds, concurrency=conc, repetition=rep)
        runs.append(
            MeasuredRun(
                summary=summary.model_copy(
                    update={
                        "started_at": run_start,
                        "finished_at": run_start + timedelta(seconds=timing.end_s),
                    }
                ),
                errors=_first_errors(key, records, 0, started_at),
                frame=records_frame(kinds, conc, rep, records),
            )
        )
        incidents += [_incident(kill, run_start) for kill in timing.kills]
        clock_s += timing.end_s
    result = grid_result(
        f"simulation of {routing.url}",
        routing.model,
        load,
        routing.token_count_source,
        started_at,
        runs,
        earlier_incidents=incidents,
    )
    finished_at = started_at + timedelta(seconds=clock_s)
    simulated, notes = provenance(cfg, fit)
    update = {
        "finished_at": finished_at,
        "simulated": simulated,
        "warnings": result.warnings + notes,
    }
    return result.model_copy(update=update), runs


STACK_VALUES_KEY = "simulatedWith"
"""The key of ``stack.json`` that holds :func:`stack_values`."""

NOT_SIMULATED = (
    "load",
    "namespace",
    "platformStack",
    "platform",
    "stackRole",
    "baselineStack",
    "parked",
)
"""Top-level config keys left out of :func:`stack_values`' ``config``: ``load`` (loadgen checks
the load settings of every stored routing run, ``loadgen.output.ResultsFolder``) and what only a
deployment reads (namespaces, the platform, the stack's role, baseline and parking)."""

SHOWN_DIFFERENCES = 4
"""Differences a refused ``--resume`` names at most (then "and N more")."""


def stack_values(cfg: StackConfig, settings: Sequence[Setting] = ()) -> dict[str, Any]:
    """What a simulation's results depend on in the stack, as ``stack.json`` records it
    (``simulatedWith``) and ``--resume`` compares it (:func:`refuse_other_stack_values`).

    ``config``: the validated config (JSON, camelCase keys, ``--set`` values applied) without
    :data:`NOT_SIMULATED`; ``linkProfiles``: the profile each of ``links.sameNode`` /
    ``links.crossNode`` stands for, with its figures (a profile file's as read now); ``settings``:
    the ``--set`` items as typed (recorded, not compared: ``config`` holds their effect).

    Raises:
        ValueError: a link setting that does not resolve (:func:`kvpath.profile.resolve_link`).
    """
    config = cfg.model_dump(mode="json", by_alias=True)
    links = {"sameNode": cfg.links.same_node, "crossNode": cfg.links.cross_node}
    return {
        "config": {k: v for k, v in config.items() if k not in NOT_SIMULATED},
        "linkProfiles": {
            key: link_profile(link).model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, link in links.items()
        },
        "settings": [setting.text for setting in settings],
    }


def _leaves(value: Any, path: tuple[PathPart, ...] = ()) -> dict[tuple[PathPart, ...], Any]:
    """Every leaf of nested JSON under its key path (an empty mapping or list is a leaf)."""
    if isinstance(value, dict) and value:
        items: list[tuple[PathPart, Any]] = list(value.items())
    elif isinstance(value, list) and value:
        items = list(enumerate(value))
    else:
        return {path: value}
    out: dict[tuple[PathPart, ...], Any] = {}
    for key, item in items:
        out |= _leaves(item, (*path, key))
    return out


def stack_value_differences(stored: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"<key path>: <stored> in the folder, <now> now"`` for each differing leaf of two
    :func:`stack_values`' ``config``, then of ``linkProfiles`` for a link whose setting is the
    same (a profile file whose figures changed)."""
    old, new = _leaves(stored.get("config", {})), _leaves(now.get("config", {}))
    paths = list(dict.fromkeys([*old, *new]))
    old_links = _leaves(stored.get("linkProfiles", {}), ("linkProfiles",))
    new_links = _leaves(now.get("linkProfiles", {}), ("linkProfiles",))
    same_setting = [
        path
        for path in dict.fromkeys([*old_links, *new_links])
        if old.get(("links", path[1])) == new.get(("links", path[1]))
    ]
    return [
        f"{show_path(path)}: {first.get(path)!r} in the folder, {second.get(path)!r} now"
        for first, second, keys in ((old, new, paths), (old_links, new_links, same_setting))
        for path in keys
        if first.get(path) != second.get(path)
    ]


def refuse_other_stack_values(stack_dir: Path, values: Mapping[str, Any]) -> None:
    """Before ``--resume`` in ``stack_dir``: its complete routing runs, and the results made
    from them, must come from the same :func:`stack_values` (``stack.json``).

    Raises:
        ResumeError: they differ (naming up to :data:`SHOWN_DIFFERENCES` key paths with both
            values), or the folder does not record them (an older testbed made it); the fix
            is another ``--out``. Nothing to check (no complete routing run) passes.
    """
    if not complete_runs(stack_dir / ROUTING_DIR):
        return
    try:
        stored = json.loads((stack_dir / STACK_FILE).read_text())[STACK_VALUES_KEY]
    except (OSError, ValueError, KeyError, TypeError):
        raise ResumeError(
            f"cannot resume in {stack_dir}: its {STACK_FILE} does not record the stack values "
            "its runs were simulated with (an older testbed made it); use another --out folder"
        ) from None
    differences = stack_value_differences(stored, values)
    if differences:
        shown = "; ".join(differences[:SHOWN_DIFFERENCES])
        more = len(differences) - SHOWN_DIFFERENCES
        shown += f"; and {more} more" if more > 0 else ""
        raise ResumeError(
            f"cannot resume in {stack_dir}: its runs were simulated with other stack values "
            f"({shown}); resume with the same stack values, or use another --out folder"
        )


@dataclass(frozen=True)
class Simulation:
    """One simulated stack: its name, routing graph, timed result and result folder."""

    stack: str
    spec: LocalGraphSpec
    result: GridResult
    out_dir: Path


def simulate_stacks(
    stacks: Sequence[str],
    out_dir: Path,
    *,
    full: bool = False,
    grid: Mapping[str, Any] | None = None,
    settings: Sequence[Setting] = (),
    speedup_ratio: float = ROUTING_SPEEDUP,
    constants: TimingConstants = CONSTANTS,
    progress: bool = True,
    resume: bool = False,
) -> list[Simulation]:
    """Routing runs of every stack side by side (real Dynamo graphs), then the timing model of
    each; returns the timed results in the order of ``stacks``.

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
    (:mod:`loadgen.folder_lock`).

    Raises:
        FileNotFoundError, KeyPathError, StackConfigError: unknown stack, bad ``--set``,
            invalid config (before any graph starts).
        LocalGraphError: a graph did not start (the message has the log tails).
        ResumeError: ``resume`` in a folder simulated with other stack values or load
            settings.
    """
    jobs = []
    for stack in stacks:
        cfg = load_stack(stack, settings)
        spec = graph_spec(cfg, speedup_ratio=speedup_ratio, routing_only=True)
        load = simulation_load(cfg, full=full, grid=grid, settings=settings)
        jobs.append(RoutingJob(cfg, spec, load, out_dir / stack))
    for job in jobs:
        values = stack_values(job.cfg, settings)
        if resume:
            refuse_other_stack_values(job.stack_dir, values)
        job.stack_dir.mkdir(parents=True, exist_ok=True)
        resources = stack_resources(job.cfg, build_topology(job.cfg))
        text = stack_file_text(job.stack_dir.name, resources, values)
        write_text_atomic(job.stack_dir / STACK_FILE, text)
        write_text_atomic(job.stack_dir / CROSSOVER_FILE, crossover_json(crossover(job.cfg)))
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
    Python, one core per stack; run one after the other, the two seed stacks' full grids took
    9 s of wall time each here. A worker still running when this returns or raises (an error
    in this process, Ctrl-C) is terminated.

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
                    job.cfg,
                    job.load,
                    routing,
                    job.stack_dir,
                    stack_constants(job.cfg, constants),
                ),
                daemon=True,
            )
            worker.start()
            workers.append((job, worker))
        last = write_timed(
            jobs[-1].cfg,
            jobs[-1].load,
            routings[-1],
            jobs[-1].stack_dir,
            stack_constants(jobs[-1].cfg, constants),
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


@dataclass(frozen=True)
class RoutingJob:
    """One stack's routing run: its config, the graph that stands in for it
    (:func:`graph_spec`), its load (:func:`simulation_load`) and its folder
    (``<out>/<stack>``)."""

    cfg: StackConfig
    spec: LocalGraphSpec
    load: LoadConfig
    stack_dir: Path


def routing_run(
    cfg: StackConfig,
    spec: LocalGraphSpec,
    load: LoadConfig,
    stack_dir: Path,
    *,
    progress: bool,
    resume: bool = False,
) -> GridResult:
    """One stack's :func:`routing_runs` (the benches' single routing run)."""
    return routing_runs([RoutingJob(cfg, spec, load, stack_dir)], progress=progress, resume=resume)[
        0
    ]


def routing_runs(
    jobs: Sequence[RoutingJob], *, progress: bool, resume: bool = False
) -> list[GridResult]:
    """Layer 1 of every job, side by side: the load grid (with :data:`ROUTING_MAX_TOKENS`
    output tokens) against the job's own real Dynamo graph; loadgen's result folder is
    ``<stack_dir>/routing`` (with the frontend's server-side metrics, and a graph process that
    ended during the grid as an incident, :class:`~testbed.localgraph.ProcessWatch`).

    Each graph has its own processes, port and folders; the graphs start together
    (:func:`~testbed.localgraph.start_together`, from this thread, so that their processes die
    with it), then the grids run in one event loop, sharing their prompts
    (:class:`loadgen.prompts.PromptCache`: the same load settings build the same prompts) and
    one progress bar. The graphs log warnings and errors only
    (:data:`~testbed.localgraph.QUIET_LOG_LEVEL`), and the load client's warnings stay in the
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
                graph.url,
                job.cfg.model.name,
                job.load.model_copy(update={"max_tokens": ROUTING_MAX_TOKENS}),
                job.stack_dir / ROUTING_DIR,
                tokenizer=str(model_dir),
                observers=[graphs.enter_context(ProcessWatch(graph))],
                resume=resume,
                server_id=f"local {job.spec!r}",
                simulated=ROUTING_LABEL,
                prompt_cache=prompts,
                progress_bar=bar,
                progress_name=job.stack_dir.name if len(jobs) > 1 else "",
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


def write_timed(
    cfg: StackConfig,
    load: LoadConfig,
    routing: GridResult,
    stack_dir: Path,
    constants: TimingConstants = CONSTANTS,
    host_base_bytes: int = HOST_BASE_BYTES,
) -> GridResult:
    """Layer 2: time the routing run in ``stack_dir/routing`` with the timing model and write
    loadgen's result folder (with ``incidents.json``) to ``stack_dir``; returns the result."""
    frame = pd.read_parquet(stack_dir / ROUTING_DIR / REQUESTS_FILE)
    result, runs = retime_grid(
        cfg, load, routing, frame, constants, host_base_bytes=host_base_bytes
    )
    settings = grid_settings(result.url, result.model, load, None)
    folder = ResultsFolder(stack_dir, settings, resume=False)
    sizing = PromptSizing(source=routing.token_count_source)
    for run in runs:
        folder.add_run(run, sizing)
    folder.write_grid(result, runs)
    return result
