"""Timing a routing run: the same requests, in the same order and closed loop, on the stack's
shared hardware (:mod:`simulator.timing_model`), as loadgen request records
(:func:`simulator.records.timing_records`), so the same statistics give the tables; the memory
model's OOMKills become incidents.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from kvpath.memory import HOST_BASE_BYTES
from loadgen.plan import run_salt
from loadgen.runner import first_run_errors, grid_keys, grid_result
from measurement.incidents import Incident
from measurement.results import GridResult
from measurement.stats import summarize_run
from outputs.folder_writer import (
    REQUESTS_FILE,
    MeasuredRun,
    PromptSizing,
    ResultsFolder,
    grid_settings,
    records_frame,
)
from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology
from simulator.provenance import provenance
from simulator.records import timing_records
from simulator.routing import ROUTING_DIR
from simulator.timing_model import (
    OOM_EXIT_CODE,
    Kill,
    SimRequest,
    TimingConstants,
    simulate_run,
)
from stackmodel.plan import StackPlan
from steptime.fit import SEED_FIT
from steptime.roofline import EngineFit
from workload.config import Arrival, LoadConfig


def sim_requests(
    frame: pd.DataFrame, load: LoadConfig, key: tuple[int, int, int]
) -> list[SimRequest]:
    """Run ``key``'s rows of a routing run's ``requests.parquet`` as timing-model requests: its
    prompt tokens and cached tokens as the real Dynamo run reported them (disaggregated: the
    decode worker's hit), the stack's ``max_tokens`` for each request as output (``maxTokens``,
    or the one ``outputLengths`` drew for it: :meth:`LoadConfig.request_lengths`; the mocker
    never stops early). A request that failed in the routing run (rare) keeps its planned
    prompt length and no prefix-cache hit."""
    lengths = load.request_lengths(load.requests_per_run, run_salt(key))
    out = []
    for row in frame.sort_values("index").itertuples():
        index = int(row.index)
        planned, output = lengths[index] if index < len(lengths) else lengths[-1]
        prompt = row.prompt_tokens if pd.notna(row.prompt_tokens) else planned
        cached = row.cached_tokens if pd.notna(row.cached_tokens) else 0
        out.append(
            SimRequest(
                index=index,
                prefix_id=int(row.prefix_id),
                prefix_tokens=load.prefix_tokens,
                prompt_tokens=int(prompt),
                cached_tokens=int(cached),
                output_tokens=output,
            )
        )
    return out


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
    plan: StackPlan,
    load: LoadConfig,
    routing: GridResult,
    routing_frame: pd.DataFrame,
    constants: TimingConstants = CONSTANTS,
    fit: EngineFit = SEED_FIT,
    host_base_bytes: int = HOST_BASE_BYTES,
) -> tuple[GridResult, list[MeasuredRun]]:
    """The grid of a routing run, timed by the timing model: per run, the same requests on the
    stack's shared hardware with engine steps of ``fit`` (an open loop's at the routing run's
    due times, ``intended_ns``, from its first); runs follow each other on one
    simulated clock from the routing run's start. Returns the result (OOMKills as incidents,
    placed in their runs) and the runs as loadgen keeps them. ``host_base_bytes``: see
    :func:`run_topology`."""
    topology = run_topology(plan, fit, host_base_bytes)
    runs: list[MeasuredRun] = []
    incidents: list[Incident] = []
    started_at = routing.started_at
    clock_s = 0.0
    keys = ["prefix_kinds", "concurrency", "repetition"]
    groups = {k: g for k, g in routing_frame.groupby(keys)}
    for key in grid_keys(load):
        kinds, conc, rep = key
        requests = sim_requests(groups[key], load, key)
        arrivals, rate = None, None
        if load.arrival is Arrival.POISSON:  # the routing run's due times, from its first
            due = groups[key].sort_values("index").intended_ns
            arrivals, rate = ((due - due.min()) / 1e9).tolist(), load.request_rate
        timing = simulate_run(topology, constants, requests, conc, arrivals_s=arrivals)
        records = timing_records(timing, requests, clock_s)
        run_start = started_at + timedelta(seconds=clock_s)
        summary = summarize_run(
            records, prefix_kinds=kinds, concurrency=conc, repetition=rep, offered_rate_per_s=rate
        )
        runs.append(
            MeasuredRun(
                summary=summary.model_copy(
                    update={
                        "started_at": run_start,
                        "finished_at": run_start + timedelta(seconds=timing.end_s),
                    }
                ),
                errors=first_run_errors(key, records, 0, started_at),
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
        gpus=plan.gpus,
    )
    finished_at = started_at + timedelta(seconds=clock_s)
    simulated, notes = provenance(plan, fit)
    update = {
        "finished_at": finished_at,
        "simulated": simulated,
        "warnings": result.warnings + notes,
    }
    return result.model_copy(update=update), runs


def write_timed(
    plan: StackPlan,
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
        plan, load, routing, frame, constants, host_base_bytes=host_base_bytes
    )
    settings = grid_settings(result.url, result.model, load, None)
    folder = ResultsFolder(stack_dir, settings, resume=False)
    sizing = PromptSizing(source=routing.token_count_source)
    for run in runs:
        folder.add_run(run, sizing)
    folder.write_grid(result, runs)
    return result
