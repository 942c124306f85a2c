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
records (:func:`simulator.records.timing_records`) and judged as a measured run is
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
and are sent late). :func:`highest_rate` searches an open loop's rate (doubling or halving,
then bisecting).

The SLO need not hold below a load that holds: percentiles of short runs, prefill chunks and
the prefix kinds' spread over the clients make a candidate fail at 7 and 9 clients and hold
at 8 and 10. So the closed-loop searches do not take monotonicity: :func:`highest_load`
doubles the concurrency from 1 until a load fails (or the cap, :data:`CLIENTS_PER_GPU` clients
per GPU of the cluster, holds), and :func:`settle` then bisects between the highest load that
holds below the lowest that fails and that failing load, to within 1/:data:`RESOLUTION`, and
probes one step below the answer (a failure there moves the search below it). The answer
holds, and so does every load below it that was probed (every power of two below it, the
bisection's loads beneath it and the step below); a load that held above one that fails is
reported (:attr:`Found.unsteady`), not taken. The capacity question (:func:`required_load`)
probes the load needed, one step below it, half and a quarter of it (:func:`ladder`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from measurement.client_cost import queue_large, short_of_offered
from measurement.goodput import evaluate_point, evaluate_run
from measurement.record import RequestRecord
from measurement.results import PointAttainment, RunSummary
from measurement.stats import Latencies, summarize_run
from recommend.workload import Workload
from simulator.records import timing_records
from simulator.timing_model import RunTopology, TimingConstants, simulate_run
from workload.config import LoadConfig
from workload.slo import Slo

CLIENTS_PER_GPU = 256
"""The cap on the concurrency :func:`highest_load` tries, per GPU of the cluster (2,048 on
one 8-GPU node): where it still holds, the search stops there and says how much room the SLO
has left (:func:`room`), as the timing model has no batch limit that would stop the load
growing past what a GPU serves."""

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
        latencies = Latencies.of([r for r in records if r.ok])  # for both: computed once
        summary = summarize_run(
            records,
            prefix_kinds=kinds,
            concurrency=concurrency,
            repetition=0,
            offered_rate_per_s=rate,
            latencies=latencies,
        )
        attained = evaluate_run(
            records, self.slo, concurrency=concurrency, closed=rate is None, latencies=latencies
        )
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


class Runs(Protocol):
    """What the searches probe: a candidate's load (:meth:`LoadRunner.at`) and its GPUs."""

    gpus: int

    def at(self, concurrency: int, order: list[int], rate: float | None = None) -> LoadPoint:
        """The load ``concurrency`` over the prefix kinds in ``order``."""
        ...


@dataclass(frozen=True)
class Found:
    """What a load search found. ``best``: the highest load that holds with every load below
    it the search probed holding too, and the one a resolution step below it (None: not even
    one client); ``over``: the lowest probed load that fails (None: ``best`` is the cap);
    ``unsteady``: where the SLO held again above ``over``, the highest such load (None: it did
    not), with ``failed_below`` the loads below that which fail (clients, ascending);
    ``steady``: every probed load up to ``best``, ascending (each holds; empty for an open
    loop's rate search)."""

    best: LoadPoint | None
    over: LoadPoint | None
    unsteady: LoadPoint | None = None
    failed_below: tuple[int, ...] = ()
    steady: tuple[LoadPoint, ...] = ()


def step(load: int) -> int:
    """The bisection's resolution at ``load`` clients (:data:`RESOLUTION`)."""
    return max(1, load // RESOLUTION)


def settle(runner: Runs, order: list[int], probes: dict[int, LoadPoint]) -> Found:
    """From the loads probed so far (``probes``, by clients), probe until the answer is steady
    and return it: the lowest failing load F and the highest holding load A below it are
    bisected to within :func:`step` of A; then the load one step below A is probed (a load that
    holds one step above a failing one is a spike, not an answer) and, when it fails, the search
    goes on below it. Every probed load up to ``best`` holds; a load that held above ``over`` is
    reported (``unsteady``), never taken."""
    while True:
        fails = [c for c, p in probes.items() if not p.holds]
        low_fail = min(fails, default=None)
        held = [c for c, p in probes.items() if p.holds and (low_fail is None or c < low_fail)]
        top = max(held, default=0)
        if low_fail is not None and low_fail - top > step(top):
            mid = max(1, (top + low_fail) // 2)
        elif top > 1 and top - step(top) not in probes:
            mid = top - step(top)
        else:
            break
        probes[mid] = runner.at(mid, order)
    above = [c for c, p in probes.items() if p.holds and low_fail is not None and c > low_fail]
    unsteady = probes[max(above)] if above else None
    return Found(
        best=probes[top] if top else None,
        over=probes[low_fail] if low_fail is not None else None,
        unsteady=unsteady,
        failed_below=tuple(sorted(c for c in fails if unsteady and c < unsteady.concurrency)),
        steady=tuple(probes[c] for c in sorted(probes) if c <= top),
    )


def highest_load(runner: Runs, kinds: Sequence[int]) -> Found:
    """The highest load that holds, with every probed load below it holding, as the module
    docstring searches: doubling from 1 client until a load fails or the cap
    (:data:`CLIENTS_PER_GPU` clients per GPU) holds, then :func:`settle`."""
    cap = CLIENTS_PER_GPU * runner.gpus
    order = sorted(set(kinds), reverse=True)
    probes: dict[int, LoadPoint] = {}
    concurrency = 1
    while True:
        probes[concurrency] = runner.at(concurrency, order)
        if not probes[concurrency].holds or concurrency == cap:
            break
        concurrency = min(concurrency * 2, cap)
    return settle(runner, order, probes)


RATE_STEPS = 16
"""The most halvings or doublings of the request rate from the workload's own before the
open-loop search stops (a rate 1/65,536 or 65,536 times the workload's)."""


def _rate(value: float) -> float:
    """A rate as the search tries it: 3 significant digits (requests/s)."""
    return float(f"{value:.3g}")


def highest_rate(
    runner: Runs, kinds: Sequence[int], start: float, cap: int, ceiling: float
) -> Found:
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
            return Found(best, None)
        else:
            rate = _rate(min(rate * 2, ceiling))
        point = runner.at(cap, order, rate)
        if point.holds:
            best = point
        else:
            failed = point
    if best is None or failed is None:
        return Found(best, failed)
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
    return Found(best, failed)


def room(point: LoadPoint, slo: Slo) -> tuple[str, float, float] | None:
    """The SLO objective nearest its bound at ``point``: (its key, its worst figure over the
    runs in ms, its bound in ms); None without a figure."""
    shares = []
    for key, bound in slo.objectives().items():
        value = point.worst(lambda r, key=key: r.point.values_ms.get(key))  # type: ignore[misc]
        if value is not None:
            shares.append((value / bound, key, value, bound))
    if not shares:
        return None
    _, key, value, bound = max(shares)
    return key, value, bound


def ladder(required: int) -> list[int]:
    """The loads the capacity question probes (clients): the load ``required``, one
    :func:`step` below it, half of it and a quarter of it (those of at least 1 client, each
    once). Half and a quarter stand for the traffic a deployment sees on its way up to its
    peak; one step below catches a load that holds only as a spike above a failing one."""
    loads = [required, required - step(required), required // 2, required // 4]
    return sorted({c for c in loads if c >= 1}, reverse=True)


def required_load(runner: Runs, kinds: Sequence[int], required: int) -> Found:
    """The capacity question's closed-loop search: the load ``required`` (clients: the stated
    load x the headroom) first; when it holds, the rest of its :func:`ladder`, and the search
    stops at ``required`` when all of them hold (it does not look for more); else
    :func:`settle` below the lowest that fails (``best`` None: not even one client)."""
    order = sorted(set(kinds), reverse=True)
    probes = {required: runner.at(required, order)}
    for load in ladder(required)[1:] if probes[required].holds else []:
        probes[load] = runner.at(load, order)
        if not probes[load].holds:
            break
    return settle(runner, order, probes)
