"""A simulated run's records keep each request's token times as one int64 array (the timing's
own arrays, never lists of Python ints), and its summary and SLO judgement read from them are
those of the same records with the times as lists, as a measured run's records hold them, to
the byte."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from measurement.goodput import evaluate_run, missed
from measurement.record import RequestRecord
from measurement.stats import Latencies, summarize_run
from recommend.load_search import measured_run
from recommend.workload import Workload
from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology
from simulator.timing_model import simulate_run
from stackmodel.stacks import load_stack
from workload.config import LoadConfig
from workload.slo import Slo, parse_slo

LOAD = LoadConfig().model_copy(
    update={"prompt_tokens": 128, "max_tokens": 96, "repetitions": 1, "requests_per_run": 40}
)


def as_lists(records: list[RequestRecord]) -> list[RequestRecord]:
    """The records with their token times as a list of Python ints."""
    return [dataclasses.replace(r, token_ns=[int(t) for t in r.token_ns]) for r in records]


def judged(records: list[RequestRecord], concurrency: int, slo: Slo) -> tuple[str, str]:
    """The run's summary and its attainment against `slo`, as JSON."""
    latencies = Latencies.of([r for r in records if r.ok])
    summary = summarize_run(
        records, prefix_kinds=1, concurrency=concurrency, repetition=0, latencies=latencies
    )
    attained = evaluate_run(records, slo, concurrency=concurrency, latencies=latencies)
    return summary.model_dump_json(), attained.model_dump_json()


@pytest.mark.parametrize(("stack", "concurrency"), [("kv-routing", 6), ("disagg-same-node", 4)])
def test_a_simulated_runs_figures_from_its_token_arrays_are_those_of_lists(
    stack: str, concurrency: int
) -> None:
    topology = run_topology(load_stack(stack))
    records, _ = measured_run(topology, CONSTANTS, Workload(LOAD), 1, concurrency)
    good = [r for r in records if r.ok]
    assert len(good) == len(records) > 30
    for r in good:
        assert isinstance(r.token_ns, np.ndarray) and r.token_ns.dtype == np.int64
        assert len(r.token_ns) == r.completion_tokens == 96
        assert (r.first_token_ns, r.last_token_ns) == (r.token_ns[0], r.token_ns[-1])
        assert isinstance(r.first_token_ns, int) and isinstance(r.last_token_ns, int)
    # bounds at the run's medians (its ITLs' p90): some requests miss each objective
    latencies = Latencies.of(good)
    p50, itl = latencies.p(50), latencies.p(90)["itl"]
    slo = parse_slo(
        f"ttft_p99_ms={p50['ttft']},itl_p90_ms={itl},tpot_p99_ms={p50['tpot']},"
        f"e2e_p50_ms={p50['e2e']},ttft_p90_ms={p50['ttft']}"
    )
    listed = as_lists(records)
    assert judged(records, concurrency, slo) == judged(listed, concurrency, slo)
    run = evaluate_run(records, slo, concurrency=concurrency)
    per_request = [missed(r, slo) for r in listed]
    assert run.missed_by == {k: sum(k in m for m in per_request) for k in slo.objectives()}
    assert all(0 < n < len(records) for n in run.missed_by.values()), run.missed_by
    assert run.met == sum(not m for m in per_request) > 0


def test_an_outcomes_token_times_are_one_read_only_array_in_order() -> None:
    """Each outcome's token times are float64 seconds in order, read-only (the stretches'
    arrays are shared by the requests of a step), one per output token."""
    plan = load_stack("kv-routing")
    sent = Workload(LOAD)
    requests = sent.closed(1, 6)
    timing = simulate_run(run_topology(plan), CONSTANTS, requests, 6, model_hits=True)
    for o in timing.outcomes:
        times = o.token_s
        assert times.dtype == np.float64 and not times.flags.writeable
        assert len(times) == 96 and bool(np.all(np.diff(times) > 0))
        assert times[0] > o.sent_s and o.end_s == times[-1]
        assert o.token_s is times  # joined once
