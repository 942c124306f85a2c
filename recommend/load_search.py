"""The highest load at which a candidate meets the SLO, with the timing model and the routing
stand-in.

The workload (:class:`recommend.workload.Workload`) is a load grid
(:class:`workload.config.LoadConfig`: prompt and output lengths, the shared prefix, the prefix
kinds) or a results folder's requests replayed; the load is the closed loop's concurrency, or
an open loop's request rate. A run at one load and one number of prefix kinds is what
``testbed simulate``'s timing layer runs
(:func:`simulator.timing_model.simulate_run` on :func:`simulator.hardware.run_topology`), its
requests sent by the model instead of a routing run (``model_hits``: each worker's prefix-cache
hits are what the model's own KV-router stand-in put on it), turned into loadgen's request
records (:func:`simulator.retime.timing_records`) and judged as a measured run is
(:func:`measurement.goodput.evaluate_run`, :func:`measurement.goodput.evaluate_point`).

A closed-loop run starts as loadgen starts one (``loadgen.loops.run_share``): its warm-up
first (``LoadConfig.warmup_count``, one request per client unless ``warmupRequests`` says
otherwise, on prefixes of their own: :meth:`recommend.workload.Workload.closed`), a closed loop
of the run's clients, all awaited; then the workload's requests, all the clients starting at
once (``loadgen.loops.run_closed_loop`` gathers its slots at once) on engines idle again
(:func:`simulator.timing_model.simulate_run`'s ``warmup``); the warm-up's are left out of the
figures, as loadgen leaves them out. An open loop sends no warm-up: its requests arrive at their
own times (:meth:`recommend.workload.Workload.open`).

A load *holds* when, at every prefix-kinds value of the workload, the point meets the SLO
(:attr:`measurement.results.PointAttainment.slo_met`), no request failed (an OOMKill of a
host-buffering worker fails requests) and an open loop delivered its offered rate
(:attr:`KindsPoint.delivered`: with its most in flight taken, requests wait at the client
and are sent late). :func:`highest_rate` searches an open loop's rate as
:func:`highest_load` searches the concurrency. :func:`highest_load` doubles the concurrency from 1
until a load fails (or :data:`CLIENTS_PER_GPU` clients per GPU of the cluster), then bisects to
within 1/:data:`RESOLUTION` of the load: it takes the SLO to hold below the highest load that
holds, as a queue's latency grows with load.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from measurement.client_cost import queue_large, short_of_offered
from measurement.goodput import evaluate_point, evaluate_run
from measurement.record import RequestRecord
from measurement.results import PointAttainment, RunSummary
from measurement.stats import summarize_run
from recommend.workload import Workload
from simulator.retime import timing_records
from simulator.timing_model import RunTopology, TimingConstants, simulate_run
from workload.config import LoadConfig
from workload.slo import Slo

CLIENTS_PER_GPU = 64
"""The most concurrency the search tries, per GPU of the cluster (512 on one 8-GPU node)."""

RESOLUTION = 32
"""The bisection stops within 1/RESOLUTION of the highest load that holds (or at 1 client):
exact to the client below 32 clients, and at most ~3% low above, so a candidate's figures
(which grow about as fast as its load, or slower) are at most ~3% below those at its true
highest load, well inside the margin a ratio claim must clear (``recommend.claims``: 25%)."""


@dataclass(frozen=True)
class KindsPoint:
    """One run at one (prefix kinds, concurrency): its summary, its SLO point and its kills."""

    prefix_kinds: int
    summary: RunSummary
    point: PointAttainment
    kills: int

    @property
    def delivered(self) -> bool:
        """An open loop sent its offered rate, its client queue small beside its TTFT (as
        loadgen marks a measured point: ``measurement.client_cost.short_of_offered``,
        ``queue_large``); a closed loop always."""
        s = self.summary
        if s.offered_rate_per_s is None:
            return True
        return not short_of_offered(s.offered_rate_per_s, s.sent_rate_per_s) and not queue_large(
            s.queue_p99_ms, s.ttft_p50_ms
        )

    @property
    def holds(self) -> bool:
        """The SLO holds, no request failed, and an open loop's offered rate was delivered."""
        return (
            self.point.slo_met and self.summary.errors == 0 and self.kills == 0 and self.delivered
        )


@dataclass(frozen=True)
class LoadPoint:
    """A load (concurrency; an open loop's: the most in flight, and ``rate`` requests/s) and
    its runs, one per prefix-kinds value run (a load that failed may stop at the first failing
    one)."""

    concurrency: int
    runs: tuple[KindsPoint, ...]
    rate: float | None = None

    @property
    def holds(self) -> bool:
        """Every run holds (and there is one)."""
        return bool(self.runs) and all(r.holds for r in self.runs)

    def mean(self, figure: Callable[[KindsPoint], float | None]) -> float:
        """The mean of ``figure`` over the runs (0 without a value)."""
        values = [v for r in self.runs if (v := figure(r)) is not None]
        return statistics.fmean(values) if values else 0.0

    def worst(self, figure: Callable[[KindsPoint], float | None]) -> float | None:
        """The largest ``figure`` over the runs (None without a value)."""
        values = [v for r in self.runs if (v := figure(r)) is not None]
        return max(values) if values else None

    def failing(self) -> KindsPoint | None:
        """The first run that does not hold."""
        return next((r for r in self.runs if not r.holds), None)


def measured_run(
    topology: RunTopology,
    constants: TimingConstants,
    sent: Workload,
    kinds: int,
    concurrency: int,
    rate: float | None = None,
    step_memo: dict[tuple[str, int, int, int], float] | None = None,
) -> tuple[list[RequestRecord], int]:
    """One run of ``sent`` at ``kinds`` prefix kinds and ``concurrency`` clients (with
    ``rate``: the open loop at ``rate`` requests/s, at most ``concurrency`` in flight), started
    as the module docstring says: its measured requests' records (the warm-up's left out, as
    loadgen leaves them out) and how many workers were OOMKilled. ``step_memo``: the
    topology's step times kept across its runs (:func:`simulator.timing_model.simulate_run`)."""
    arrivals = None
    if rate is None:
        requests = sent.closed(kinds, concurrency)
        warmup = sent.load.warmup_count(concurrency)
    else:
        requests, arrivals = sent.open(kinds, rate)
        warmup = 0
    timing = simulate_run(
        topology,
        constants,
        requests,
        concurrency,
        model_hits=True,
        arrivals_s=arrivals,
        warmup=warmup,
        step_memo=step_memo,
    )
    return timing_records(timing, requests, 0.0)[warmup:], len(timing.kills)


@dataclass
class LoadRunner:
    """Runs a candidate's loads (one topology, one workload, one SLO, its GPU count)."""

    topology: RunTopology
    constants: TimingConstants
    load: LoadConfig
    slo: Slo
    gpus: int
    runs: int = 0
    workload: Workload | None = None
    step_memo: dict[tuple[str, int, int, int], float] = field(default_factory=dict)
    """Its topology's engine step times, kept across its runs (:func:`measured_run`)."""

    @property
    def sent(self) -> Workload:
        """What is sent: ``workload``, else ``load``'s synthetic requests."""
        return self.workload if self.workload is not None else Workload(self.load)

    def run(self, kinds: int, concurrency: int, rate: float | None = None) -> KindsPoint:
        """One run at ``kinds`` prefix kinds and ``concurrency`` clients; with ``rate``, the
        open loop at ``rate`` requests/s, at most ``concurrency`` in flight."""
        self.runs += 1
        records, kills = measured_run(
            self.topology, self.constants, self.sent, kinds, concurrency, rate, self.step_memo
        )
        summary = summarize_run(
            records,
            prefix_kinds=kinds,
            concurrency=concurrency,
            repetition=0,
            offered_rate_per_s=rate,
        )
        attained = evaluate_run(records, self.slo, concurrency=concurrency, closed=rate is None)
        point = evaluate_point([attained], self.slo, gpus=self.gpus)
        return KindsPoint(kinds, summary, point, kills)

    def at(self, concurrency: int, order: list[int], rate: float | None = None) -> LoadPoint:
        """The load ``concurrency`` (with ``rate``: the open loop at that rate, at most
        ``concurrency`` in flight) over the workload's prefix kinds, in ``order``, stopping at
        the first that fails; ``order`` is rearranged so that one comes first next time."""
        runs = []
        for kinds in list(order):
            point = self.run(kinds, concurrency, rate)
            runs.append(point)
            if not point.holds:
                order.remove(kinds)
                order.insert(0, kinds)
                break
        return LoadPoint(concurrency, tuple(runs), rate)


def highest_load(
    runner: LoadRunner, kinds: Sequence[int]
) -> tuple[LoadPoint | None, LoadPoint | None]:
    """The highest load that holds (None: not even one client) and the lowest load above it
    that fails (None: the ceiling holds), as the module docstring searches."""
    ceiling = CLIENTS_PER_GPU * runner.gpus
    order = sorted(set(kinds), reverse=True)
    best: LoadPoint | None = None
    failed: LoadPoint | None = None
    concurrency = 1
    while concurrency <= ceiling:
        point = runner.at(concurrency, order)
        if not point.holds:
            failed = point
            break
        best = point
        if concurrency == ceiling:
            return best, None
        concurrency = min(concurrency * 2, ceiling)
    if best is None:
        return None, failed
    assert failed is not None
    low, high = best.concurrency, failed.concurrency
    while high - low > max(1, low // RESOLUTION):
        mid = (low + high) // 2
        point = runner.at(mid, order)
        if point.holds:
            best, low = point, mid
        else:
            failed, high = point, mid
    return best, failed


RATE_STEPS = 16
"""The most halvings or doublings of the request rate from the workload's own before the
open-loop search stops (a rate 1/65,536 or 65,536 times the workload's)."""


def _rate(value: float) -> float:
    """A rate as the search tries it: 3 significant digits (requests/s)."""
    return float(f"{value:.3g}")


def highest_rate(
    runner: LoadRunner, kinds: Sequence[int], start: float, cap: int, ceiling: float
) -> tuple[LoadPoint | None, LoadPoint | None]:
    """The open loop's :func:`highest_load`: the highest request rate that holds at most
    ``cap`` in flight (None: not even the lowest tried) and the lowest rate above it that
    fails (None: ``ceiling`` holds, requests/s). From ``start`` (the workload's rate) it
    halves until a rate holds, or doubles until one fails (at most :data:`RATE_STEPS` times),
    then bisects to within 1/:data:`RESOLUTION` of the rate."""
    order = sorted(set(kinds), reverse=True)
    rate = _rate(min(start, ceiling))
    point = runner.at(cap, order, rate)
    best: LoadPoint | None = point if point.holds else None
    failed: LoadPoint | None = None if point.holds else point
    for _ in range(RATE_STEPS):
        if best is not None and failed is not None:
            break
        if best is None:
            rate = _rate(rate / 2)
        elif rate >= ceiling:
            return best, None
        else:
            rate = _rate(min(rate * 2, ceiling))
        point = runner.at(cap, order, rate)
        if point.holds:
            best = point
        else:
            failed = point
    if best is None or failed is None:
        return best, failed
    assert best.rate is not None and failed.rate is not None
    low, high = best.rate, failed.rate
    while high - low > low / RESOLUTION:
        mid = _rate((low + high) / 2)
        if mid in (low, high):
            break
        point = runner.at(cap, order, mid)
        if point.holds:
            best, low = point, mid
        else:
            failed, high = point, mid
    return best, failed


def required_load(
    runner: LoadRunner, kinds: Sequence[int], required: int
) -> tuple[LoadPoint | None, LoadPoint | None]:
    """The capacity question's closed-loop search: the load ``required`` (clients: the stated
    load x the headroom) first; when it holds, that point and None (the search stops there:
    it does not look for more); else the highest load below it that holds (None: not even one
    client), bisected to within 1/:data:`RESOLUTION` of it as :func:`highest_load` bisects,
    and the lowest load above that which fails."""
    order = sorted(set(kinds), reverse=True)
    failed = runner.at(required, order)
    if failed.holds:
        return failed, None
    best: LoadPoint | None = None
    low, high = 0, required
    while high - low > max(1, low // RESOLUTION):
        mid = max(1, (low + high) // 2)
        point = runner.at(mid, order)
        if point.holds:
            best, low = point, mid
        else:
            failed, high = point, mid
    return best, failed
