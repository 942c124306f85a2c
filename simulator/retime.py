"""Timing a routing run: the same requests, in the same order and closed loop, on the stack's
shared hardware (:mod:`simulator.timing_model`), as loadgen request records, so the same
statistics give the tables; the memory model's OOMKills become incidents.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from kvpath.memory import HOST_BASE_BYTES
from loadgen.plan import run_salt
from loadgen.runner import first_run_errors, grid_keys, grid_result
from measurement.errors import ErrorKind
from measurement.incidents import Incident
from measurement.record import RequestRecord
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
from simulator.routing import ROUTING_DIR
from simulator.timing_model import (
    OOM_EXIT_CODE,
    Kill,
    Outcome,
    RunTiming,
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


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _ns_all(offset_s: float, seconds: Sequence[float]) -> list[int]:
    """``_ns(offset_s + t)`` of each of ``seconds``, array-wise: the same sums and products,
    rounded half to even as ``round`` rounds."""
    return list(
        np.rint((offset_s + np.asarray(seconds, dtype=np.float64)) * 1e9).astype(np.int64).tolist()
    )


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
        due = sent if o.intended_s is None else _ns(offset_s + o.intended_s)
        record = RequestRecord(index=o.index, prefix_id=spec.prefix_id, intended_ns=due)
        record.sent_ns = sent
        if o.error is None:
            tokens = _ns_all(offset_s, o.token_s)
            record.status = 200
            record.first_byte_ns = record.first_chunk_ns = record.first_token_ns = tokens[0]
            record.token_ns = tokens
            record.chunks = len(tokens) + 1
            record.end_ns = record.last_token_ns = tokens[-1]
            record.finish_reason = "length"
            record.prompt_tokens = spec.prompt_tokens
            record.completion_tokens = len(tokens)
            record.cached_tokens = o.cached_tokens
            _frontend_timing(record, o)
        else:
            record.status = 503 if o.error_kind == ErrorKind.HTTP_STATUS else 200
            record.error_kind = ErrorKind(o.error_kind or ErrorKind.IN_BAND)
            record.error = o.error
            record.error_ns = record.end_ns = _ns(offset_s + (o.error_s or o.sent_s))
        records.append(record)
    return records


def _frontend_timing(record: RequestRecord, o: Outcome) -> None:
    """What a Dynamo frontend returns of a successful simulated request
    (``measurement.record.RequestRecord``'s frontend fields), from its outcome: the replicas'
    names as worker ids; the prefill wait to ``routed_s``; the frontend's TTFT to the first
    token (aggregated) or to the prefill leg's return (disaggregated), and there the transfer
    estimate from that return to the decode worker's first token, as the real frontend's runs.
    Left empty without a frontend (``routed_s`` None)."""
    record.prefill_worker_id, record.decode_worker_id = o.prefill_worker, o.decode_worker
    if o.routed_s is None:
        return
    first = o.token_s[0]
    record.frontend_prefill_wait_ms = (o.routed_s - o.sent_s) * 1e3
    ttft_end = first if o.prefill_done_s is None else o.prefill_done_s
    record.frontend_ttft_ms = (ttft_end - o.sent_s) * 1e3
    record.frontend_prefill_ms = (ttft_end - o.routed_s) * 1e3
    record.frontend_total_ms = (o.token_s[-1] - o.sent_s) * 1e3
    if o.prefill_done_s is not None:
        record.kv_transfer_estimated_ms = (first - o.prefill_done_s) * 1e3


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
