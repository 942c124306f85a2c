"""The highest load at which a candidate meets the SLO, with the timing model and the routing
stand-in.

The workload is a load grid (:class:`loadgen.config.LoadConfig`: prompt and output lengths,
the shared prefix, the prefix kinds); the load is the closed loop's concurrency. A run at one
concurrency and one number of prefix kinds is what ``testbed simulate``'s timing layer runs
(:func:`simulator.timing_model.simulate_run` on :func:`simulator.hardware.run_topology`), its
requests sent by the model instead of a routing run (``model_hits``: each worker's prefix-cache
hits are what the model's own KV-router stand-in put on it), turned into loadgen's request
records (:func:`simulator.retime.timing_records`) and judged as a measured run is
(:func:`loadgen.goodput.evaluate_run`, :func:`loadgen.goodput.evaluate_point`).

A run starts as loadgen starts one (``loadgen.loops.run_share``): its warm-up first
(``LoadConfig.warmup_count``, one request per client unless ``warmupRequests`` says otherwise,
shaped as the measured ones but on prefixes of their own, as ``loadgen.plan.share_for_run``
builds them with another salt), a closed loop of the run's clients, all awaited; then the
measured requests, all the clients starting at once (``loadgen.loops.run_closed_loop`` gathers
its slots at once) on engines idle again (:func:`simulator.timing_model.simulate_run`'s
``warmup``). The measured requests are the workload's ``requestsPerRun`` (at least
:data:`MEASURED_PER_CLIENT` per client), each on one of the prefix kinds, drawn with the
workload's seed; the warm-up's are left out of the figures, as loadgen leaves them out.

A load *holds* when, at every prefix-kinds value of the workload, the point meets the SLO
(:attr:`loadgen.results.PointAttainment.slo_met`) and no request failed (an OOMKill of a
host-buffering worker fails requests). :func:`highest_load` doubles the concurrency from 1
until a load fails (or :data:`CLIENTS_PER_GPU` clients per GPU of the cluster), then bisects to
within 1/:data:`RESOLUTION` of the load: it takes the SLO to hold below the highest load that
holds, as a queue's latency grows with load.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.config import LoadConfig
from loadgen.goodput import evaluate_point, evaluate_run
from loadgen.results import PointAttainment, RunSummary
from loadgen.slo import Slo
from loadgen.stats import summarize_run
from simulator.retime import timing_records
from simulator.timing_model import RunTopology, SimRequest, TimingConstants, simulate_run

CLIENTS_PER_GPU = 64
"""The most concurrency the search tries, per GPU of the cluster (512 on one 8-GPU node)."""

RESOLUTION = 32
"""The bisection stops within 1/RESOLUTION of the highest load that holds (or at 1 client):
exact to the client below 32 clients, and at most ~3% low above, so a candidate's figures
(which grow about as fast as its load, or slower) are at most ~3% below those at its true
highest load, well inside the margin a ratio claim must clear (``recommend.claims``: 25%)."""

MEASURED_PER_CLIENT = 2
"""The fewest measured requests per client of a run."""


def workload_requests(
    load: LoadConfig, kinds: int, concurrency: int
) -> tuple[list[SimRequest], int]:
    """One run's requests (the module docstring) and how many of them, first, are its warm-up:
    the warm-up on prefix ids ``kinds..2 * kinds - 1``, then the measured requests on prefix
    ids ``0..kinds-1``."""
    warmup = load.warmup_count(concurrency)
    measured = max(load.requests_per_run, MEASURED_PER_CLIENT * concurrency)
    pick = random.Random(f"{load.seed}:recommend:{kinds}:{concurrency}")
    shape = (load.prefix_tokens, load.prompt_tokens, 0, load.max_tokens)
    warm = [SimRequest(i, kinds + pick.randrange(kinds), *shape) for i in range(warmup)]
    return warm + [
        SimRequest(warmup + i, pick.randrange(kinds), *shape) for i in range(measured)
    ], warmup


@dataclass(frozen=True)
class KindsPoint:
    """One run at one (prefix kinds, concurrency): its summary, its SLO point and its kills."""

    prefix_kinds: int
    summary: RunSummary
    point: PointAttainment
    kills: int

    @property
    def holds(self) -> bool:
        """The SLO holds and no request failed."""
        return self.point.slo_met and self.summary.errors == 0 and self.kills == 0


@dataclass(frozen=True)
class LoadPoint:
    """A load (concurrency) and its runs, one per prefix-kinds value run (a load that failed
    may stop at the first failing one)."""

    concurrency: int
    runs: tuple[KindsPoint, ...]

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


@dataclass
class LoadRunner:
    """Runs a candidate's loads (one topology, one workload, one SLO, its GPU count)."""

    topology: RunTopology
    constants: TimingConstants
    load: LoadConfig
    slo: Slo
    gpus: int
    runs: int = 0

    def run(self, kinds: int, concurrency: int) -> KindsPoint:
        """One run at ``kinds`` prefix kinds and ``concurrency`` clients."""
        self.runs += 1
        requests, warmup = workload_requests(self.load, kinds, concurrency)
        timing = simulate_run(
            self.topology, self.constants, requests, concurrency, model_hits=True, warmup=warmup
        )
        records = timing_records(timing, requests, 0.0)[warmup:]
        summary = summarize_run(records, prefix_kinds=kinds, concurrency=concurrency, repetition=0)
        attained = evaluate_run(records, self.slo, concurrency=concurrency)
        point = evaluate_point([attained], self.slo, gpus=self.gpus)
        return KindsPoint(kinds, summary, point, len(timing.kills))

    def at(self, concurrency: int, order: list[int]) -> LoadPoint:
        """The load ``concurrency`` over the workload's prefix kinds, in ``order``, stopping at
        the first that fails; ``order`` is rearranged so that one comes first next time."""
        runs = []
        for kinds in list(order):
            point = self.run(kinds, concurrency)
            runs.append(point)
            if not point.holds:
                order.remove(kinds)
                order.insert(0, kinds)
                break
        return LoadPoint(concurrency, tuple(runs))


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
