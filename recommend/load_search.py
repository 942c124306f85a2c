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
and are sent late).

The SLO need not hold below a load that holds: percentiles of short runs, prefill chunks and
the prefix kinds' spread over the clients make a candidate fail at 7 and 9 clients and hold
at 8 and 10. So the searches do not take monotonicity. One search serves both loads, on an
:class:`Axis`: a closed loop's clients (whole numbers from 1, at most :data:`CLIENTS_PER_GPU`
per GPU of the cluster) or an open loop's request rate (requests/s at 3 significant digits,
from the workload's rate, at most the candidate's rate ceiling, the workload's concurrency
in flight). :func:`highest_load` doubles the load from the axis' start until a load fails (or
the axis' top holds), and :func:`settle` then bisects between the highest load that holds
below the lowest that fails and that failing load (halving below a start that fails), to
within 1/:data:`RESOLUTION` of the load (a whole client at least), and probes one step below
the answer (a failure there moves the search below it). Given the SLO, a closed loop's climb
also stops where the candidate is saturated (:func:`saturation`): doubling the clients moved
neither its output tokens/s nor any objective of an SLO that bounds no queued latency by
:data:`SATURATION` or more, so more clients only wait longer in its queue and the SLO holds at
any higher load; the highest load timed is then the answer (:attr:`Found.saturated`). The
answer holds, and so does every load below it that was probed (the climb's loads below it, the
bisection's loads beneath it and the step below); a load that held above one that fails is
reported (:attr:`Found.unsteady`), not taken. The capacity question (:func:`required_load`)
probes the load needed and one step below it, and half and a quarter of it where the SLO is
near a bound there (:func:`ladder`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from measurement.client_cost import queue_large, short_of_offered
from measurement.goodput import evaluate_point, evaluate_run
from measurement.record import RequestRecord
from measurement.results import PointAttainment, RunSummary
from measurement.stats import Latencies, summarize_run
from metrics.registry import objectives
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

    @property
    def gpus(self) -> int:
        """The cluster's GPUs."""
        ...

    def at(self, concurrency: int, order: list[int], rate: float | None = None) -> LoadPoint:
        """The load ``concurrency`` over the prefix kinds in ``order``."""
        ...


RATE_STEPS = 16
"""The most halvings or doublings of the request rate from the workload's own that the
open-loop search tries (a rate 1/65,536 or 65,536 times the workload's)."""


@dataclass(frozen=True)
class Axis:
    """The load a search varies: a closed loop's clients (whole numbers, ``in_flight`` None)
    or an open loop's request rate (requests/s at 3 significant digits, at most ``in_flight``
    requests in flight). The search climbs from ``start``, doubling, to at most ``top`` (the
    clients cap, or the rate's ceiling); it goes no lower than ``least``; its resolution at a
    load is :meth:`step` (1/:data:`RESOLUTION` of it, a whole client at least)."""

    start: float
    top: float
    least: float
    in_flight: int | None = None

    @classmethod
    def clients(cls, gpus: int) -> Axis:
        """The closed loop's: 1 client up to :data:`CLIENTS_PER_GPU` clients per GPU."""
        return cls(start=1, top=CLIENTS_PER_GPU * gpus, least=1)

    @classmethod
    def rates(cls, in_flight: int, start: float, ceiling: float) -> Axis:
        """The open loop's: from ``start`` (requests/s) up to ``ceiling`` (rounded down to 3
        significant digits: no rate tried is above it) or :data:`RATE_STEPS` doublings, down to
        as many halvings, at most ``in_flight`` in flight."""
        top = ceiling
        if math.isfinite(ceiling):
            unit = 10.0 ** (math.floor(math.log10(ceiling)) - 2)
            top = float(f"{math.floor(ceiling / unit) * unit:.3g}")
        first = min(float(f"{start:.3g}"), top)
        return cls(first, min(top, first * 2**RATE_STEPS), first / 2**RATE_STEPS, in_flight)

    def snap(self, load: float) -> float:
        """``load`` as the search tries it: whole clients (rounded down), or a rate at 3
        significant digits."""
        return float(f"{load:.3g}") if self.in_flight is not None else float(int(load))

    def step(self, load: float) -> float:
        """The resolution at ``load``: 1/:data:`RESOLUTION` of it (a whole client at least)."""
        return load / RESOLUTION if self.in_flight is not None else max(1, load // RESOLUTION)

    def at(self, runner: Runs, load: float, order: list[int]) -> LoadPoint:
        """``runner``'s point at ``load`` (:meth:`LoadRunner.at`)."""
        if self.in_flight is None:
            return runner.at(int(load), order)
        return runner.at(self.in_flight, order, load)

    def up(self, load: float) -> float | None:
        """The climb's next load: twice ``load``, at most ``top`` (None: ``load`` is the top)."""
        higher = self.snap(min(2 * load, self.top))
        return higher if higher > load else None

    def between(self, low: float, high: float) -> float | None:
        """The bisection's next load between ``low`` (the highest that holds below ``high``;
        0: none) and ``high`` (the lowest that fails); None when they are within the
        resolution at ``low`` or no load of the axis lies between."""
        if high - low <= self.step(low):
            return None
        mid = self.snap((low + high) / 2)
        return mid if low < mid < high and mid >= self.least else None

    def below(self, load: float) -> float | None:
        """The load one :meth:`step` below ``load`` (None: none of the axis)."""
        lower = self.snap(load - self.step(load))
        return lower if self.least <= lower < load else None


@dataclass(frozen=True)
class Found:
    """What a load search found. ``best``: the highest load that holds with every load below
    it the search probed holding too, and the one a resolution step below it (None: not even
    the axis' least load); ``over``: the lowest probed load that fails (None: ``best`` is the
    axis' top); ``unsteady``: where the SLO held again above ``over``, the highest such load
    (None: it did not), with ``failed_below`` the loads below that which fail (on the axis:
    clients or requests/s, ascending); ``steady``: every probed load up to ``best``,
    ascending (each holds)."""

    best: LoadPoint | None
    over: LoadPoint | None
    unsteady: LoadPoint | None = None
    failed_below: tuple[float, ...] = ()
    steady: tuple[LoadPoint, ...] = ()
    saturated: Saturation | None = None
    """Where the climb stopped below the axis' top because the candidate is saturated there
    (``best`` is its ``upper`` load; None: it did not)."""
    short_of: int | None = None
    """The fewest clients of use to the caller (:func:`highest_load`'s ``first``) when a load
    at or below them failed (``over``: the lowest that did) or they lie above the axis' top
    (``over`` None): the answer is below them and the search stopped there (``best`` None;
    None: it did not)."""


SATURATION = 1 / RESOLUTION
"""The share (1/32: ~3%) below which doubling a closed loop's clients counts as moving neither
its output tokens/s nor an SLO figure. A saturated run's output tokens/s still creep up with
its length (the drain at its end, when the queue has emptied and the batch shrinks, is a
smaller share of a longer run): each doubling adds about half what the one before added, so
the figures at the answer are below those at any higher load by about the last doubling's
gain, at most this share: the bisection's own bound (:data:`RESOLUTION`). The project's noise
between two runs of a stack (:data:`measurement.intervals.NOISE_THRESHOLD`, 5%) would leave
them up to ~5% low (the one-node Llama-70B search's saturated leaders: 4.5%)."""


@dataclass(frozen=True)
class Saturation:
    """A closed loop saturated: from ``lower`` clients to ``upper`` (the climb's last two
    loads, each holding) the output tokens/s moved by ``gain`` and each SLO objective by
    ``moved`` (objective key -> its worst figure's change), shares (0.012: +1.2%), each within
    :data:`SATURATION`; the SLO bounds no latency that is ``queued`` (metrics.registry)."""

    lower: int
    upper: int
    gain: float
    moved: dict[str, float]


def saturation(lower: LoadPoint, upper: LoadPoint, slo: Slo) -> Saturation | None:
    """Whether a closed loop that holds at ``lower`` and ``upper`` clients (``upper`` above) is
    saturated (:class:`Saturation`), so the SLO holds at any load above ``upper``: no objective
    of ``slo`` is on a queued latency (TTFT, E2E: those a queue adds to), the output tokens/s
    and every objective's worst figure moved by less than :data:`SATURATION` from ``lower`` to
    ``upper``. A closed loop past what its engines serve keeps the same requests in its
    batches, so the same decode steps and per-token latencies, and queues the rest (None: not
    saturated, or a figure is missing)."""
    registry = objectives()
    if any(registry[key].metric.queued for key in slo.objectives()):
        return None
    before = lower.mean(lambda r: r.summary.output_tokens_per_s)
    after = upper.mean(lambda r: r.summary.output_tokens_per_s)
    if before <= 0 or abs(after / before - 1) >= SATURATION:
        return None
    moved = {}
    for key in slo.objectives():
        low = lower.worst(lambda r, key=key: r.point.values_ms.get(key))  # type: ignore[misc]
        high = upper.worst(lambda r, key=key: r.point.values_ms.get(key))  # type: ignore[misc]
        if not low or high is None or abs(high / low - 1) >= SATURATION:
            return None
        moved[key] = high / low - 1
    return Saturation(lower.concurrency, upper.concurrency, after / before - 1, moved)


def settle(
    runner: Runs,
    axis: Axis,
    order: list[int],
    probes: dict[float, LoadPoint],
    first: float | None = None,
) -> Found:
    """From the loads probed so far (``probes``, by their load on ``axis``), probe until the
    answer is steady and return it: the lowest failing load F and the highest holding load A
    below it are bisected to within :meth:`Axis.step` of A; then the load one step below A is
    probed (a load that holds one step above a failing one is a spike, not an answer) and,
    when it fails, the search goes on below it. Every probed load up to ``best`` holds; a load
    that held above ``over`` is reported (``unsteady``), never taken. ``first``: once F is at
    or below it, the answer is below it: the search stops there (:attr:`Found.short_of`)."""
    while True:
        fails = [x for x, p in probes.items() if not p.holds]
        low_fail = min(fails, default=None)
        if first is not None and low_fail is not None and low_fail <= first:
            return Found(best=None, over=probes[low_fail], short_of=int(first))
        held = [x for x, p in probes.items() if p.holds and (low_fail is None or x < low_fail)]
        top = max(held, default=0.0)
        nxt = axis.between(top, low_fail) if low_fail is not None else None
        if nxt is None and top:
            nxt = axis.below(top)
            nxt = None if nxt in probes else nxt
        if nxt is None:
            break
        probes[nxt] = axis.at(runner, nxt, order)
    above = [x for x, p in probes.items() if p.holds and low_fail is not None and x > low_fail]
    unsteady = probes[max(above)] if above else None
    return Found(
        best=probes[top] if top else None,
        over=probes[low_fail] if low_fail is not None else None,
        unsteady=unsteady,
        failed_below=tuple(sorted(x for x in fails if above and x < max(above))),
        steady=tuple(probes[x] for x in sorted(probes) if x <= top),
    )


def highest_load(
    runner: Runs,
    kinds: Sequence[int],
    axis: Axis | None = None,
    slo: Slo | None = None,
    first: int | None = None,
) -> Found:
    """The highest load on ``axis`` (default: :meth:`Axis.clients` of ``runner``'s GPUs) that
    holds, with every probed load below it holding, as the module docstring searches: from
    the axis' start, doubling until a load fails or the axis' top holds, or (a closed loop,
    given ``slo``) the last doubling shows the candidate saturated (:func:`saturation`), then
    :func:`settle` (which halves below a start that fails).

    ``first`` (a closed loop's clients): the fewest clients whose answer is of use to the
    caller. Once a load at or below them fails, the answer is below them and the search stops
    (:attr:`Found.short_of`; at once where they lie above the axis' top); until then it is the
    search above, so where none fails it finds what it finds without ``first``."""
    axis = axis if axis is not None else Axis.clients(runner.gpus)
    order = sorted(set(kinds), reverse=True)
    if first is not None and axis.in_flight is None and first > axis.top:
        return Found(best=None, over=None, short_of=first)
    probes: dict[float, LoadPoint] = {}
    saturated = None
    load: float | None = axis.start
    previous: LoadPoint | None = None
    while load is not None:
        point = probes[load] = axis.at(runner, load, order)
        if slo is not None and axis.in_flight is None and previous is not None and point.holds:
            saturated = saturation(previous, point, slo)
        load = axis.up(load) if point.holds and saturated is None else None
        previous = point
    found = settle(runner, axis, order, probes, first if axis.in_flight is None else None)
    if saturated is None or found.best is None or found.best.concurrency != saturated.upper:
        return found
    return replace(found, saturated=saturated)


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


RAMP_ROOM = 0.8
"""The capacity question times the ramp (half and a quarter of the load needed) only where the
load needed or the one a step below it came above this share of an SLO bound (or gave no
figure): there a lower load's figures, which move between neighbouring loads, may cross the
bound. Below it a ramp load fails only with a figure above 1.25 times the load needed's
(docs/recommend.md, "The capacity question", gives the figures seen on the seed's cluster)."""


def ladder(required: float, axis: Axis) -> list[float]:
    """The loads the capacity question may probe on ``axis``, in order: the load
    ``required``, one :meth:`Axis.step` below it, half of it and a quarter of it (those of the
    axis, each once, highest first). Half and a quarter stand for the traffic a deployment
    sees on its way up to its peak (the ramp); one step below catches a load that holds only
    as a spike above a failing one."""
    loads = [required, axis.below(required), axis.snap(required / 2), axis.snap(required / 4)]
    return sorted({x for x in loads if x is not None and x >= axis.least}, reverse=True)


def near_bound(point: LoadPoint, slo: Slo) -> bool:
    """Whether ``point``'s figure nearest its SLO bound is above :data:`RAMP_ROOM` of that
    bound (or it has none)."""
    near = room(point, slo)
    return near is None or near[1] > RAMP_ROOM * near[2]


def required_load(
    runner: Runs, kinds: Sequence[int], required: float, axis: Axis, slo: Slo
) -> Found:
    """The capacity question's search on ``axis``: its :func:`ladder` from the load
    ``required`` (the stated load x the headroom) down, stopping at the first load that fails;
    the ramp (half and a quarter) only where the load needed or the step below it is near an
    SLO bound (:func:`near_bound`; elsewhere they add no information). The search stops at
    ``required`` when all it timed hold (it does not look for more); else :func:`settle`
    below the lowest that fails, reusing every load timed (``best`` None: not even the axis'
    least load)."""
    order = sorted(set(kinds), reverse=True)
    probes: dict[float, LoadPoint] = {}
    for load in ladder(required, axis):
        if len(probes) >= 2 and not any(near_bound(p, slo) for p in probes.values()):
            break
        probes[load] = axis.at(runner, load, order)
        if not probes[load].holds:
            break
    return settle(runner, axis, order, probes)
